// FlashAttention-2's forward pass on tensor cores, written by hand: the twin of
// moye/examples/attention_mma.py (same algorithm, tiles, threads and shared layouts).
// O = softmax(Q K^T * scale) V; Q, K, V, O float16 (batch * heads, seqlen, 64), row-major,
// seqlen a multiple of 64; fp32 accumulation, mma.sync m16n8k16. Grid (seqlen / 64,
// batch * heads), 4 warps; warp w owns rows 16 w .. 16 w + 15 of the Q tile, of S and of O.
// Shared tiles are 64 rows of 128 bytes, 16-byte chunk c of row r stored at c ^ (r % 8), so
// cp.async writes and ldmatrix reads are free of bank conflicts. Fragment layouts: PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type".

#define BM 64
#define BN 64
#define D 64
#define THREADS 128

typedef unsigned short u16;     // an fp16 value, as bits
typedef unsigned int u32;

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

// the element offset of (row, col) in a swizzled 64x64 tile
__device__ __forceinline__ int swz(int row, int col) {
    return row * D + ((((col >> 3) ^ row) & 7) << 3) + (col & 7);
}

__device__ __forceinline__ void cp_async16(u16* s, const u16* g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem_addr(s)), "l"(g));
}

#define CP_ASYNC_COMMIT() asm volatile("cp.async.commit_group;\n" ::: "memory")
#define CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group " #n ";\n" ::: "memory")

// a 64x64 tile of rows of 64 halves, 16 bytes per copy, 16 rows per pass of 128 threads
__device__ __forceinline__ void load_tile(u16* s, const u16* g, int tid) {
#pragma unroll
    for (int i = 0; i < BN * D / 8 / THREADS; ++i) {
        int id = tid + i * THREADS, row = id >> 3, col = (id & 7) << 3;
        cp_async16(s + swz(row, col), g + row * D + col);
    }
}

__device__ __forceinline__ void ldmatrix_x4(u32* r, const u16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32* r, const u16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// c += a b: a 16x16 A fragment, b0 b1 an 8x16 B fragment, c a 16x8 accumulator
__device__ __forceinline__ void mma_16816(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// two floats as fp16x2, lo in the low half
__device__ __forceinline__ u32 pack_half2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
}

__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x + __shfl_xor_sync(0xffffffffu, x, 1);
}

extern "C" __global__ void __launch_bounds__(THREADS)
attention_mma(const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
              u16* __restrict__ O, int seqlen, float scale_log2) {
    __shared__ __align__(128) u16 sQ[BM * D];
    __shared__ __align__(128) u16 sK[BN * D];
    __shared__ __align__(128) u16 sV[BN * D];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const long long head = (long long)blockIdx.y * seqlen * D;
    const u16* q = Q + head + (long long)blockIdx.x * BM * D;
    const u16* k = K + head;
    const u16* v = V + head;

    // cp.async groups, oldest first: Q + K_0, V_0, then K_1, V_1, ...
    load_tile(sQ, q, tid);
    load_tile(sK, k, tid);
    CP_ASYNC_COMMIT();
    load_tile(sV, v, tid);
    CP_ASYNC_COMMIT();
    CP_ASYNC_WAIT(1);
    __syncthreads();

    // Q stays in registers: 4 A fragments (k16 blocks) of the warp's 16 rows; lanes 0-15
    // address rows 0-15 at k 0, lanes 16-31 the same rows at k 8
    u32 qa[D / 16][4];
#pragma unroll
    for (int kb = 0; kb < D / 16; ++kb)
        ldmatrix_x4(qa[kb], sQ + swz(16 * warp + (lane & 15), 16 * kb + (lane >> 4) * 8));

    // a thread's accumulators: n8 atom n, values (c, r) at row lane / 4 + 8 r,
    // column 8 n + 2 (lane % 4) + c
    float o[D / 8][4], s[BN / 8][4], row_max[2], row_sum[2];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[n][i] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_max[r] = __int_as_float(0xff800000);     // -infinity
        row_sum[r] = 0.0f;
    }

    const int n_tiles = seqlen / BN;
    for (int t = 0; t < n_tiles; ++t) {
        CP_ASYNC_WAIT(1);                       // K_t has landed
        __syncthreads();
#pragma unroll
        for (int n = 0; n < BN / 8; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) s[n][i] = 0.0f;
        // S = Q K^T; one ldmatrix.x4 gives the B fragments of two n8 atoms: lanes 0-7
        // address keys 0-7 at k 0, lanes 8-15 at k 8, lanes 16-31 keys 8-15 likewise
#pragma unroll
        for (int kb = 0; kb < D / 16; ++kb) {
#pragma unroll
            for (int np = 0; np < BN / 16; ++np) {
                u32 b[4];
                ldmatrix_x4(b, sK + swz(16 * np + (lane & 7) + (lane >> 4) * 8,
                                        16 * kb + ((lane >> 3) & 1) * 8));
                mma_16816(s[2 * np], qa[kb], b[0], b[1]);
                mma_16816(s[2 * np + 1], qa[kb], b[2], b[3]);
            }
        }
        __syncthreads();                        // sK is read: fetch K_{t+1} under the rest
        if (t + 1 < n_tiles) load_tile(sK, k + (long long)(t + 1) * BN * D, tid);
        CP_ASYNC_COMMIT();

        // online softmax, in units of log2; a row lives in the 4 lanes of a quad
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float m = s[0][2 * r];
#pragma unroll
            for (int n = 0; n < BN / 8; ++n) m = fmaxf(m, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
            float m_new = fmaxf(row_max[r], quad_max(m) * scale_log2);
            float correction = exp2f(row_max[r] - m_new);
            row_max[r] = m_new;
            float total = 0.0f;
#pragma unroll
            for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    float p = exp2f(s[n][2 * r + c] * scale_log2 - m_new);
                    s[n][2 * r + c] = p;
                    total += p;
                }
            }
            row_sum[r] = row_sum[r] * correction + quad_sum(total);
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                o[n][2 * r] *= correction;
                o[n][2 * r + 1] *= correction;
            }
        }
        // P in fp16 registers: the accumulators of n8 atoms 2 kb, 2 kb + 1 are the A
        // fragment of k16 block kb
        u32 pa[BN / 16][4];
#pragma unroll
        for (int kb = 0; kb < BN / 16; ++kb) {
            pa[kb][0] = pack_half2(s[2 * kb][0], s[2 * kb][1]);
            pa[kb][1] = pack_half2(s[2 * kb][2], s[2 * kb][3]);
            pa[kb][2] = pack_half2(s[2 * kb + 1][0], s[2 * kb + 1][1]);
            pa[kb][3] = pack_half2(s[2 * kb + 1][2], s[2 * kb + 1][3]);
        }

        CP_ASYNC_WAIT(1);                       // V_t has landed
        __syncthreads();
        // O += P V; V's rows (keys) are contiguous along the head dim, the MMA's N: the
        // transposing ldmatrix gives the B fragments of two n8 atoms, lanes 0-7 addressing
        // keys 0-7, lanes 8-15 keys 8-15, lanes 16-31 the same keys 8 columns on
#pragma unroll
        for (int kb = 0; kb < BN / 16; ++kb) {
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
                u32 b[4];
                ldmatrix_x4_trans(b, sV + swz(16 * kb + (lane & 15), 16 * dp + (lane >> 4) * 8));
                mma_16816(o[2 * dp], pa[kb], b[0], b[1]);
                mma_16816(o[2 * dp + 1], pa[kb], b[2], b[3]);
            }
        }
        __syncthreads();                        // sV is read: fetch V_{t+1}
        if (t + 1 < n_tiles) load_tile(sV, v + (long long)(t + 1) * BN * D, tid);
        CP_ASYNC_COMMIT();
    }

    u16* out = O + head + (long long)(blockIdx.x * BM + 16 * warp + lane / 4) * D + 2 * (lane % 4);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float inv = 1.0f / row_sum[r];
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<u32*>(out + 8 * r * D + 8 * n) =
                pack_half2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
}
