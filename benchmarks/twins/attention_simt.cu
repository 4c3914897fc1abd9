// FlashAttention-2's forward pass on the CUDA cores, written by hand: the twin of
// moye/examples/attention_simt.py (same algorithm, tiles, threads and shared layouts).
// O = softmax(Q K^T * scale) V; Q, K, V, O float32 (batch * heads, seqlen, 64), row-major,
// seqlen a multiple of 64. Grid (seqlen / 64, batch * heads), 256 threads.
// Thread t owns rows t / 16 + 16 i and columns t % 16 + 16 j (i, j < 4) of S and O; a
// row's 16 threads are one half-warp. K, V stream through shared memory by cp.async.

#define BM 64
#define BN 64
#define D 64
#define PAD 65                  // padded rows of sQ, sK, sP: a half-warp's 16 rows, 16 banks
#define THREADS 256
#define SMEM_BYTES ((BM * PAD + BN * PAD + BN * D + BM * PAD) * 4)

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async4(float* s, const float* g) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(smem_addr(s)), "l"(g));
}

__device__ __forceinline__ void cp_async16(float* s, const float* g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem_addr(s)), "l"(g));
}

#define CP_ASYNC_COMMIT() asm volatile("cp.async.commit_group;\n" ::: "memory")
#define CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group " #n ";\n" ::: "memory")

// a 64x64 tile into padded rows, 4 bytes per copy, a row of 64 threads at a time
__device__ __forceinline__ void load_padded(float* s, const float* g, int tid) {
#pragma unroll
    for (int i = 0; i < BM * D / THREADS; ++i) {
        int row = tid / D + i * (THREADS / D), col = tid % D;
        cp_async4(s + row * PAD + col, g + row * D + col);
    }
}

// a 64x64 tile into dense rows, 16 bytes per copy
__device__ __forceinline__ void load_dense(float* s, const float* g, int tid) {
#pragma unroll
    for (int i = 0; i < BN * D / 4 / THREADS; ++i) {
        int id = tid + i * THREADS, row = id / (D / 4), col = id % (D / 4) * 4;
        cp_async16(s + row * D + col, g + row * D + col);
    }
}

__device__ __forceinline__ float half_warp_max(float x) {
#pragma unroll
    for (int mask = 8; mask > 0; mask >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, mask));
    return x;
}

__device__ __forceinline__ float half_warp_sum(float x) {
#pragma unroll
    for (int mask = 8; mask > 0; mask >>= 1) x += __shfl_xor_sync(0xffffffffu, x, mask);
    return x;
}

extern "C" __global__ void __launch_bounds__(THREADS)
attention_simt(const float* __restrict__ Q, const float* __restrict__ K,
               const float* __restrict__ V, float* __restrict__ O, int seqlen,
               float scale_log2) {
    // 66,304 bytes: past the 48 KiB of static shared memory, so dynamic (SMEM_BYTES at launch,
    // with cudaFuncAttributeMaxDynamicSharedMemorySize raised to it)
    extern __shared__ __align__(16) float smem[];
    float* sQ = smem;
    float* sK = sQ + BM * PAD;
    float* sV = sK + BN * PAD;                  // 16-byte aligned: 2 * 64 * 65 floats
    float* sP = sV + BN * D;
    const int tid = threadIdx.x, tm = tid / 16, tn = tid % 16;
    const long long head = (long long)blockIdx.y * seqlen * D;
    const float* q = Q + head + (long long)blockIdx.x * BM * D;
    const float* k = K + head;
    const float* v = V + head;

    // cp.async groups, oldest first: Q + K_0, V_0, then K_1, V_1, ...
    load_padded(sQ, q, tid);
    load_padded(sK, k, tid);
    CP_ASYNC_COMMIT();
    load_dense(sV, v, tid);
    CP_ASYNC_COMMIT();

    float o[4][4], s[4][4], row_max[4], row_sum[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        row_max[i] = __int_as_float(0xff800000);      // -infinity
        row_sum[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) o[i][j] = 0.0f;
    }

    const int n_tiles = seqlen / BN;
    for (int t = 0; t < n_tiles; ++t) {
        CP_ASYNC_WAIT(1);                       // K_t has landed
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) s[i][j] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = sQ[(tm + 16 * i) * PAD + kk];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = sK[(tn + 16 * j) * PAD + kk];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) s[i][j] = fmaf(a[i], b[j], s[i][j]);
        }
        __syncthreads();                        // sK is read: fetch K_{t+1} under the rest
        if (t + 1 < n_tiles) load_padded(sK, k + (long long)(t + 1) * BN * D, tid);
        CP_ASYNC_COMMIT();

        // online softmax, in units of log2
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float m = fmaxf(fmaxf(s[i][0], s[i][1]), fmaxf(s[i][2], s[i][3]));
            float m_new = fmaxf(row_max[i], half_warp_max(m) * scale_log2);
            float correction = exp2f(row_max[i] - m_new);
            row_max[i] = m_new;
            float total = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float p = exp2f(s[i][j] * scale_log2 - m_new);
                sP[(tm + 16 * i) * PAD + tn + 16 * j] = p;
                total += p;
            }
            row_sum[i] = row_sum[i] * correction + half_warp_sum(total);
#pragma unroll
            for (int j = 0; j < 4; ++j) o[i][j] *= correction;
        }

        CP_ASYNC_WAIT(1);                       // V_t has landed; sP is written
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BN; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = sP[(tm + 16 * i) * PAD + kk];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = sV[kk * D + tn + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) o[i][j] = fmaf(a[i], b[j], o[i][j]);
        }
        __syncthreads();                        // sV and sP are read: fetch V_{t+1}
        if (t + 1 < n_tiles) load_dense(sV, v + (long long)(t + 1) * BN * D, tid);
        CP_ASYNC_COMMIT();
    }

    float* out = O + head + (long long)blockIdx.x * BM * D;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float inv = 1.0f / row_sum[i];
#pragma unroll
        for (int j = 0; j < 4; ++j) out[(tm + 16 * i) * D + tn + 16 * j] = o[i][j] * inv;
    }
}
