// Elementwise and optimizer kernels of the trainer's CUDA backend
// (trainer/backend/cuda.go). kernels.ptx beside this file is generated from it
// by gen.sh and embedded in the Go binary; edit this file, then run gen.sh.
//
// Conventions shared with the Go launcher (cudaKernels in cuda_kernels.go):
//   - every kernel is a grid-stride loop over 32-bit indices; the launcher
//     keeps every element count below 2^30 so i + stride cannot overflow;
//   - pointers are device pointers to float or int, counts are int, scalars
//     are float, in exactly the order of the parameter lists below.

#if defined(__clang__) && !defined(__NVCC__) && !defined(__CUDACC__)
// clang -x cuda -nocudainc (gen.sh's fallback when nvcc is missing) does not
// include the CUDA headers: declare the few names these kernels use.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#include <__clang_cuda_builtin_vars.h>
static __device__ inline float atomicAdd(float* p, float v) { return __nvvm_atom_add_gen_f(p, v); }
static __device__ inline float sqrtf(float x) { return __nvvm_sqrt_rn_f(x); }
static __device__ inline float fmaxf(float a, float b) { return __nvvm_fmax_f(a, b); }
static __device__ inline int max(int a, int b) { return a > b ? a : b; }
static __device__ inline int min(int a, int b) { return a < b ? a : b; }
#endif

#define GRID_STRIDE(i, n) \
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)

// fill: x[i] = v for i < n.
extern "C" __global__ void fill(float* x, int n, float v) {
    GRID_STRIDE(i, n) { x[i] = v; }
}

// add_row_vector: x[r,c] += v[c] for x rows×cols.
extern "C" __global__ void add_row_vector(float* x, const float* v, int rows, int cols) {
    int n = rows * cols;
    GRID_STRIDE(i, n) { x[i] += v[i % cols]; }
}

// sum_rows: dst[c] += Σ_r x[r,c]. One thread per (column, chunk of `chunk`
// rows) sums its chunk and adds it to dst[c] atomically.
extern "C" __global__ void sum_rows(float* dst, const float* x, int rows, int cols, int chunk) {
    int chunks = (rows + chunk - 1) / chunk;
    int n = cols * chunks;
    GRID_STRIDE(i, n) {
        int c = i % cols;
        int r0 = (i / cols) * chunk;
        int r1 = min(r0 + chunk, rows);
        float s = 0.0f;
        for (int r = r0; r < r1; ++r) {
            s += x[(long long)r * cols + c];
        }
        atomicAdd(&dst[c], s);
    }
}

// relu: y[i] = max(x[i], 0); y may be x.
extern "C" __global__ void relu(float* y, const float* x, int n) {
    GRID_STRIDE(i, n) { y[i] = fmaxf(x[i], 0.0f); }
}

// relu_backward: dx[i] = y[i] > 0 ? dy[i] : 0; dx may be dy.
extern "C" __global__ void relu_backward(float* dx, const float* dy, const float* y, int n) {
    GRID_STRIDE(i, n) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; }
}

// embedding_bag: out[b,d] = Σ_{j in [offsets[b], offsets[b+1])} w[j]·table[idx[j],d],
// one thread per (bag, dim) element. Entries outside [0, nidx) and rows outside
// [0, rows) are skipped, so bad indices cannot fault the device.
extern "C" __global__ void embedding_bag(float* out, const float* table, const int* idx,
                                         const int* offsets, const float* w,
                                         int batch, int dim, int rows, int nidx) {
    int n = batch * dim;
    GRID_STRIDE(i, n) {
        int b = i / dim;
        int d = i - b * dim;
        int j0 = max(offsets[b], 0);
        int j1 = min(offsets[b + 1], nidx);
        float s = 0.0f;
        for (int j = j0; j < j1; ++j) {
            int r = idx[j];
            if ((unsigned)r < (unsigned)rows) {
                s += w[j] * table[(long long)r * dim + d];
            }
        }
        out[i] = s;
    }
}

// embedding_bag_backward: gradTable[idx[j],d] += w[j]·gradOut[b,d] for every
// entry j of bag b, one thread per (bag, dim) element, atomically.
extern "C" __global__ void embedding_bag_backward(float* gradTable, const float* gradOut,
                                                  const int* idx, const int* offsets,
                                                  const float* w, int batch, int dim,
                                                  int rows, int nidx) {
    int n = batch * dim;
    GRID_STRIDE(i, n) {
        int b = i / dim;
        int d = i - b * dim;
        int j0 = max(offsets[b], 0);
        int j1 = min(offsets[b + 1], nidx);
        float g = gradOut[i];
        for (int j = j0; j < j1; ++j) {
            int r = idx[j];
            if ((unsigned)r < (unsigned)rows) {
                atomicAdd(&gradTable[(long long)r * dim + d], w[j] * g);
            }
        }
    }
}

// adamw: decoupled weight decay Adam over n parameters; bc1 = 1-β1^step and
// bc2 = 1-β2^step are computed by the host.
extern "C" __global__ void adamw(float* p, const float* g, float* m, float* v, int n,
                                 float lr, float beta1, float beta2, float eps, float wd,
                                 float bc1, float bc2) {
    GRID_STRIDE(i, n) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        float pi = p[i];
        p[i] = pi - lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
    }
}
