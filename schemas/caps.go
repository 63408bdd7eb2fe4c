package schemas

// DefaultNameCap is the default of Limits.Name: the most bytes of any id or
// name field. Validate refuses a longer one with a *FieldError of code
// CodeTooLarge naming the field (the ingest gateway answers 400, the
// processors dead-letter the event at stage syntax).
//
// The capped fields, every one an identity or a name:
//   - the envelope's event_id, project and source;
//   - every string field of every event that is neither an enum (bounded by
//     its symbols) nor free text: the ids (campaign_id, cell_id, task_id,
//     update_id, sample_id), the model names (agent_model, evolver_model,
//     judge_model), benchmark, the harness versions (h0_version,
//     harness_version, from_version, to_version), skill_name, reason_code,
//     source_topic, model_version;
//   - every element of the string lists (benchmarks, anchor_agents,
//     anchor_evolvers, skills_loaded, evidence_task_ids), each artifact's
//     name, each checkpoint offset's topic, each metric's name.
//
// The free-text fields are marked prose (or carry their own Limits cap) in
// the field table of fields.go, the one list: task_input, evidence_summary,
// query, update, reason, rejected.message, and checkpoint_published.
// checkpoint_uri (a path, not a name). A new string field there is
// capped as a name unless it is marked so.
//
// 256 bytes leave every statement the sink builds from ids under
// ClickHouse's max_query_size (chddl.MaxStatementBytes).
const DefaultNameCap = 256
