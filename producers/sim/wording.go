package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Wording of the skills' markdown: several phrasings of every content
// element, headings and list markers, and a shuffled section order, all drawn
// from the seed, so that a model that memorises exact phrases cannot predict
// an update's effect and has to generalise. Each bank keeps some phrasings
// apart (held): they are used only, and alone, with Config.HeldOutWording.

// bank is one element's phrasings: train for ordinary campaigns, held for
// held-out-wording campaigns.
type bank struct{ train, held []string }

func (b bank) pool(heldOut bool) []string {
	if heldOut {
		return b.held
	}
	return b.train
}

func words(train []string, held ...string) bank { return bank{train: train, held: held} }

// focusWords phrase each focus kind (the blockquote under the title).
var focusWords = [numFocus]bank{
	focusTestsFirst: words([]string{"Run the tests before submitting.", "Execute the test suite before you hand anything in.",
		"Never submit until the tests have run and passed."}, "Make a full test run the last thing you do before you finish."),
	focusToolsFirst: words([]string{"List the available tools before doing anything else.", "Start by enumerating the tools you can call.",
		"First find out which tools exist and what arguments they take."}, "Take an inventory of the callable tools up front."),
	focusFormatCheck: words([]string{"Validate the output format before you finish.", "Check that the output matches the requested format exactly.",
		"Confirm the format of every output before stopping."}, "Do not stop until the shape of the output has been verified."),
	focusReproduce: words([]string{"Reproduce the failure before changing anything.", "Get a failing reproduction first, then fix.",
		"Make the problem happen on demand before you touch the code."}, "Start from a reproduction of the fault."),
	focusClaims: words([]string{"Split the request into claims and support each one.", "Break the question into separate claims before answering.",
		"Answer claim by claim, each backed by evidence."}, "Decompose the answer into verifiable claims."),
}

// stepWords, checkWords and specificWords are per benchmark: concrete steps
// (six), verification checks (three) and domain details (three).
var stepWords = map[string][]bank{
	BenchSWE: {
		words([]string{"Locate the failing code path from the issue.", "Trace the issue to the function that misbehaves."}, "Pin down the code path the issue describes."),
		words([]string{"Write a minimal test that fails.", "Capture the bug in the smallest failing test you can write."}, "Encode the bug as a tiny failing test."),
		words([]string{"Patch the root cause, not the symptom.", "Fix the underlying cause rather than the visible symptom."}, "Repair the origin of the fault."),
		words([]string{"Run the tests of the changed module with pytest -x.", "Rerun the tests that import the changed file."}, "Exercise the touched module's test file."),
		words([]string{"Re-read the diff and drop unrelated edits.", "Review the patch and remove drive-by changes."}, "Prune the diff to the lines the fix needs."),
		words([]string{"Try empty, None and boundary inputs.", "Exercise the edge cases of the changed function."}, "Probe the inputs at their limits."),
	},
	BenchMCP: {
		words([]string{"Call list_tools and read each tool's schema.", "Read the schema of every tool before the first call."}, "Study the tools' input schemas first."),
		words([]string{"Write down every fact the answer must contain.", "Note each fact the request asks for."}, "Record the facts the reply has to state."),
		words([]string{"Map each fact to the tool that can supply it.", "Pick one tool per fact before calling any."}, "Pair every fact with a source tool."),
		words([]string{"Follow pagination tokens until the listing ends.", "Keep fetching pages while a next-page token is returned."}, "Exhaust paginated results."),
		words([]string{"Cross-check key facts with a second tool.", "Confirm important values with an independent tool."}, "Corroborate the main facts from another source."),
		words([]string{"Quote identifiers verbatim from tool output.", "Copy ids and names exactly as the tools return them."}, "Reproduce identifiers character for character."),
	},
	BenchSB: {
		words([]string{"Quote every explicit constraint of the task.", "Copy the task's constraints into a list."}, "Extract the task's requirements word for word."),
		words([]string{"Note the expected output file and its format.", "Write down the output path and format the task asks for."}, "Record where the result goes and in what shape."),
		words([]string{"List the tools shipped in the environment.", "Check which tools the task's image provides."}, "Survey the environment's installed tools."),
		words([]string{"Read the --help of the tools you will use.", "Skim each tool's usage text before running it."}, "Look up the options of each tool first."),
		words([]string{"Make one change at a time and rerun the check.", "Run the task's check after every edit."}, "Iterate in small edits, checking after each."),
		words([]string{"Write the output with a strict serializer.", "Produce the output file with a proper library, not by hand."}, "Emit the result through a real encoder."),
	},
}

var checkWords = map[string][]bank{
	BenchSWE: {
		words([]string{"The new test fails before the patch and passes after it.", "The reproduction test flips from failing to passing."}, "The failing test turns green only with the fix."),
		words([]string{"The module's existing tests still pass.", "No previously passing test in the module now fails."}, "Nothing that passed before is broken."),
		words([]string{"The diff touches only files the fix needs.", "No unrelated file appears in the diff."}, "The patch stays inside the fix's files."),
	},
	BenchMCP: {
		words([]string{"Every claim in the answer cites a tool call.", "Each sentence is backed by a tool result."}, "No statement lacks a supporting call."),
		words([]string{"All pages of every listing were read.", "No listing stopped at a non-empty page token."}, "Every paginated result was read to the end."),
		words([]string{"Identifiers match the tool output exactly.", "Ids and names are copied without changes."}, "Names agree with the tools byte for byte."),
	},
	BenchSB: {
		words([]string{"Each quoted constraint is met.", "Every item of the constraint list is satisfied."}, "All the task's requirements hold."),
		words([]string{"The output file parses with a strict parser.", "A strict parser reads the output without errors."}, "The result loads cleanly in a strict reader."),
		words([]string{"The task's check command passes.", "The provided checker reports success."}, "The bundled verifier is happy."),
	},
}

var specificWords = map[string][]bank{
	BenchSWE: {
		words([]string{"In Django, run tests with ./runtests.py and the app label.", "Django's suite runs with tests/runtests.py <app>."}, "For django, use runtests.py scoped to one app."),
		words([]string{"Sympy expressions are immutable: build new ones instead of editing.", "Never mutate a sympy Basic in place; construct a new expression."}, "Treat sympy objects as read-only values."),
		words([]string{"Skip traceback frames from site-packages; start in the repository.", "The first repository frame of the traceback is the place to look."}, "Ignore library frames and read the repo's own frame."),
	},
	BenchMCP: {
		words([]string{"Atlas tools return at most 50 rows per page.", "Listings are capped at 50 items per page."}, "Pages hold no more than fifty entries."),
		words([]string{"Search tools match prefixes, not substrings.", "Tool search is prefix-based, so query from the start of the name."}, "Queries match from the beginning of a name."),
		words([]string{"Dates come back in UTC ISO 8601.", "Timestamps from the tools are ISO 8601 in UTC."}, "Every time value is UTC, ISO formatted."),
	},
	BenchSB: {
		words([]string{"Spreadsheet tasks expect .xlsx written with openpyxl.", "Write spreadsheets as .xlsx through openpyxl."}, "Spreadsheets must be real xlsx files."),
		words([]string{"PDF extraction works best with pdftotext -layout.", "Use pdftotext -layout to keep the PDF's columns."}, "Keep PDF layout by extracting with -layout."),
		words([]string{"Checkers compare CSV headers case-sensitively.", "CSV header names must match the task's case exactly."}, "Header names are compared with exact case."),
	},
}

// fillerWords are generic sentences that say nothing concrete.
var fillerWords = words([]string{"Be careful and thorough.", "Think step by step.", "Double-check your reasoning.", "Stay focused on the task."},
	"Work methodically and avoid shortcuts.", "Keep a clear head throughout.", "Aim for quality in everything you do.")

// backgroundWords are verbose paragraphs (%s: the benchmark's name).
var backgroundWords = words([]string{
	"This skill grew out of the failures of the last round on %s, where the agent lost time on avoidable mistakes. It collects what the evolver saw and how to avoid it next time.",
	"Agents working on %s tasks often rush to an answer. The notes here slow that down a little, at the cost of a few extra turns, which in the evolver's experience usually pays off.",
	"The guidance in this skill is general and may not apply to every %s task; use judgement about which parts matter for the task at hand and which can be skipped.",
},
	"Over several rounds of %s the same patterns kept coming back, so this section records them at some length for future reference.",
	"A word on scope: the advice below was distilled from %s runs and has not been tried elsewhere, so read it as a set of hints rather than rules.",
	"Much of what follows will seem obvious, yet the %s runs showed that obvious things are exactly what an agent under time pressure forgets.",
)

// Section kinds of the skill body, and their headings.
const (
	secSteps = iota
	secChecks
	secSpecific
	secFiller
	secVerbose
	numSections
)

var headingWords = [numSections]bank{
	secSteps:    words([]string{"## Steps", "## Procedure", "## How to apply it"}, "## Workflow"),
	secChecks:   words([]string{"## Checks", "## Before you finish", "## Verification"}, "## Sanity checks"),
	secSpecific: words([]string{"## Specifics", "## Details for this benchmark", "## Domain notes"}, "## Particulars"),
	secFiller:   words([]string{"## General advice", "## Tips", "## Reminders"}, "## Good habits"),
	secVerbose:  words([]string{"## Background", "## Context", "## Why this skill exists"}, "## History"),
}

// listMarkers format the i-th (1-based) item of a numbered or bulleted list.
var (
	stepMarkers   = words([]string{"%d. ", "%d) "}, "Step %d: ")
	bulletMarkers = words([]string{"- ", "* "}, "+ ")
	checkMarkers  = words([]string{"- [ ] ", "* [ ] "}, "[ ] ")
)

var benchNames = map[string]string{BenchSWE: "SWE-bench Verified", BenchMCP: "MCP-Atlas", BenchSB: "SkillsBench"}

func pick(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }

// phrases returns n distinct elements of banks (a random subset in random
// order), each in one of its phrasings.
func phrases(r *rand.Rand, banks []bank, n int, heldOut bool) []string {
	out := make([]string, 0, n)
	for _, i := range r.Perm(len(banks))[:min(n, len(banks))] {
		out = append(out, pick(r, banks[i].pool(heldOut)))
	}
	return out
}

// body renders the skill's content as markdown sections in a shuffled order
// (steps always come before checks): the focus as a blockquote, then one
// section per non-empty content element.
func body(r *rand.Rand, c content, bm string, heldOut bool) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "> %s\n\n", pick(r, focusWords[c.focus].pool(heldOut)))
	items := [numSections][]string{
		secSteps:    phrases(r, stepWords[bm], c.steps, heldOut),
		secChecks:   phrases(r, checkWords[bm], c.checks, heldOut),
		secSpecific: phrases(r, specificWords[bm], c.specific, heldOut),
		secFiller:   phrases(r, wordsBanks(fillerWords, heldOut), c.filler, heldOut),
		secVerbose:  phrases(r, wordsBanks(backgroundWords, heldOut), c.verbose, heldOut),
	}
	order := r.Perm(numSections)
	// Steps before checks: swap their positions if needed.
	is, ic := slices.Index(order, secSteps), slices.Index(order, secChecks)
	if is > ic {
		order[is], order[ic] = secChecks, secSteps
	}
	stepM, bulletM, checkM := pick(r, stepMarkers.pool(heldOut)), pick(r, bulletMarkers.pool(heldOut)), pick(r, checkMarkers.pool(heldOut))
	for _, sec := range order {
		if len(items[sec]) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "%s\n\n", pick(r, headingWords[sec].pool(heldOut)))
		for i, it := range items[sec] {
			switch sec {
			case secSteps:
				fmt.Fprintf(&sb, stepM+"%s\n", i+1, it)
			case secChecks:
				fmt.Fprintf(&sb, "%s%s\n", checkM, it)
			case secVerbose:
				fmt.Fprintf(&sb, it+"\n\n", benchNames[bm])
			default:
				fmt.Fprintf(&sb, "%s%s\n", bulletM, it)
			}
		}
		if sec != secVerbose {
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

// wordsBanks turns a flat list of interchangeable sentences into one bank
// per sentence (each its own single phrasing), so phrases draws distinct ones.
func wordsBanks(w bank, heldOut bool) []bank {
	p := w.pool(heldOut)
	out := make([]bank, len(p))
	for i, s := range p {
		out[i] = bank{train: []string{s}, held: []string{s}}
	}
	return out
}
