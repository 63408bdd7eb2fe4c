// Package backend is the trainer's small tensor/ops interface and its registry
// of implementations: pure Go on the CPU (cpu.go) and CUDA loaded at run time
// without cgo (cuda*.go). Every tensor is a flat float32 (or int32) buffer in
// row-major order; a Backend owns its buffers' memory (host or device).
//
// Operations are asynchronous on devices that queue work; Download and Sync
// wait for queued work. A Backend is not safe for concurrent use.
package backend

// Buffer is a float32 array owned by a Backend.
type Buffer interface {
	// Len is the number of float32 elements.
	Len() int
}

// IntBuffer is an int32 array owned by a Backend (indices, offsets).
type IntBuffer interface {
	// Len is the number of int32 elements.
	Len() int
}

// HostView is implemented by backends whose buffers are host memory (the CPU
// backend). View returns b's elements themselves, not a copy: the slice is
// valid until b is freed and changes with b; callers only read it. A reader
// of a whole tensor (a checkpoint) uses it instead of Download, which on such
// a backend would only add a second copy of the tensor to the heap.
type HostView interface {
	View(b Buffer) []float32
}

// Lerper is implemented by backends with a fused moving-average update (the
// CPU backend). The trainer's Polyak averaging uses it where it exists and a
// rank-1 Gemm (avg = (1−b)·1·w + b·avg) elsewhere: a cuBLAS Gemm streams the
// buffer at memory speed, gonum's generic path for that shape is several
// times slower than a plain loop.
type Lerper interface {
	// Lerp sets dst = b·dst + (1−b)·src over the first n elements.
	Lerp(dst, src Buffer, n int, b float32)
}

// Backend is the set of operations the trainer's model needs.
type Backend interface {
	// Name says which backend and device this is, e.g. "cpu" or "cuda:NVIDIA H200".
	Name() string

	// Alloc returns a zeroed buffer of n float32s.
	Alloc(n int) Buffer
	// AllocInt returns a zeroed buffer of n int32s.
	AllocInt(n int) IntBuffer
	// Free releases a buffer; using it afterwards is a bug.
	Free(b Buffer)
	// FreeInt releases an int buffer.
	FreeInt(b IntBuffer)
	// Upload copies src (len ≤ dst.Len()) into the start of dst.
	Upload(dst Buffer, src []float32)
	// UploadInt copies src (len ≤ dst.Len()) into the start of dst.
	UploadInt(dst IntBuffer, src []int32)
	// Download copies the first len(dst) elements of src into dst, waiting for
	// queued work first.
	Download(dst []float32, src Buffer)

	// Fill sets the first n elements of x to v.
	Fill(x Buffer, n int, v float32)
	// Gemm computes C = alpha·op(A)·op(B) + beta·C with row-major matrices:
	// op(A) is m×k (A is k×m when transA), op(B) is k×n (B is n×k when transB),
	// C is m×n.
	Gemm(transA, transB bool, m, n, k int, alpha float32, a, b Buffer, beta float32, c Buffer)
	// AddRowVector adds v (cols) to every row of x (rows×cols).
	AddRowVector(x, v Buffer, rows, cols int)
	// SumRows accumulates column sums: dst[c] += Σ_r x[r,c] for x rows×cols.
	SumRows(dst, x Buffer, rows, cols int)
	// ReLU sets y = max(x, 0) over the first n elements (y may be x).
	ReLU(y, x Buffer, n int)
	// ReLUBackward sets dx = dy where y > 0 and 0 elsewhere, over n elements
	// (dx may be dy).
	ReLUBackward(dx, dy, y Buffer, n int)
	// EmbeddingBag computes, for each bag b < batch, out[b,:] = Σ w[j]·table[idx[j],:]
	// over j in [offsets[b], offsets[b+1]); table is rows×dim, out batch×dim,
	// offsets has batch+1 entries. out is overwritten.
	EmbeddingBag(out, table Buffer, idx, offsets IntBuffer, w Buffer, batch, dim int)
	// EmbeddingBagBackward accumulates gradTable[idx[j],:] += w[j]·gradOut[b,:]
	// for every j of bag b.
	EmbeddingBagBackward(gradTable, gradOut Buffer, idx, offsets IntBuffer, w Buffer, batch, dim int)
	// AdamW updates n parameters in place with decoupled weight decay
	// (Loshchilov & Hutter): m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
	// p -= lr·( m/(1−β1^step) / (sqrt(v/(1−β2^step)) + eps) + wd·p ). step ≥ 1.
	AdamW(p, g, m, v Buffer, n int, lr, beta1, beta2, eps, wd float32, step int)

	// Sync waits for all queued work and reports a device error, if any.
	Sync() error
	// Close releases the backend and all its buffers.
	Close() error
}
