// Hand-written twin of moye/examples/gemm.py (make_config("Float16") defaults:
// A and B K-major, no residue, 16-byte D stores), for benchmarks/compile_time.py.
// D = alpha * A @ B^T + beta * C: A (M, K), B (N, K), C and D (M, N), all
// row-major fp16, fp32 accumulation.
// - 256x128x64 block tile, 3 cp.async stages in Swizzle<3,3,3> o (8,64) K-major
//   shared tiles (144 KiB of dynamic shared memory), read by ldmatrix.x4;
// - 8 warps (4 along M x 2 along N), mma.sync.m16n8k16: warp (wm, wn) owns
//   m16 tiles at rows 16*wm + 64*i and n8 tiles at columns 8*wn + 16*j;
//   k-block kb + 1 is read with ldmatrix while kb is multiplied;
// - blocks in columns of 16 tiles (a 1-D grid) for L2 reuse;
// - epilogue: alpha * acc as fp16 into a padded (256, 136) tile in sA's
//   buffer, then 16-byte rows to D with beta * C added.
// M a multiple of 256, N of 128, K of 64.
#include <cuda_fp16.h>

#define BM 256
#define BN 128
#define BK 64
#define STAGES 3
#define GROUP 16
#define SC_LD (BN + 8)

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
// the 8x64 atoms' swizzle: 16-byte chunk (bits 3-5) ^= row within the atom (bits 6-8)
__device__ __forceinline__ int swz(int offset) { return offset ^ ((offset >> 3) & 0x38); }

__device__ __forceinline__ void cp_async16(half* smem, const half* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem_u32(smem)), "l"(gmem)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const half* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(smem)));
}
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                          unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// one (ROWS, 64) K-major tile: thread t copies 8 halves at row t/8 + 32*i, column 8*(t%8)
template <int ROWS>
__device__ __forceinline__ void load_tile(half* s, const half* g, int ld, int tid) {
  #pragma unroll
  for (int i = 0; i < ROWS / 32; ++i) {
    const int r = tid / 8 + 32 * i, c = 8 * (tid % 8);
    cp_async16(s + swz(r * BK + c), g + r * ld + c);
  }
}

// k-block kb of one stage: A's 4 m16 tiles and B's 8 n8 tiles of this warp
__device__ __forceinline__ void load_frags(unsigned (&a)[4][4], unsigned (&b)[8][2],
                                           const half* sA, const half* sB, int kb, int wm,
                                           int wn, int lane) {
  #pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = 16 * wm + 64 * i + lane % 16, c = 16 * kb + 8 * (lane / 16);
    ldmatrix_x4(a[i], sA + swz(r * BK + c));
  }
  #pragma unroll
  for (int p = 0; p < 4; ++p) {
    const int mat = lane / 8;
    const int r = 8 * wn + 32 * p + 16 * (mat / 2) + lane % 8, c = 16 * kb + 8 * (mat % 2);
    unsigned x[4];
    ldmatrix_x4(x, sB + swz(r * BK + c));
    b[2 * p][0] = x[0];
    b[2 * p][1] = x[1];
    b[2 * p + 1][0] = x[2];
    b[2 * p + 1][1] = x[3];
  }
}

extern "C" __global__ void __launch_bounds__(256)
gemm_twin(const half* A, const half* B, half* D, const half* C, float alpha, float beta, int M,
          int N, int K, int lda, int ldb, int ldd, int ldc) {
  extern __shared__ __align__(1024) unsigned char smem[];
  half* sA = reinterpret_cast<half*>(smem);                  // [STAGES][BM * BK]
  half* sB = sA + STAGES * BM * BK;                          // [STAGES][BN * BK]
  const int tid = threadIdx.x, lane = tid % 32, wm = tid / 32 % 4, wn = tid / 128;

  // the block's tile: down columns of GROUP tiles
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int per_group = GROUP * tiles_n, first_m = blockIdx.x / per_group * GROUP;
  const int rows = min(tiles_m - first_m, GROUP), in_group = blockIdx.x % per_group;
  const int bx = first_m + in_group % rows, by = in_group / rows;
  const half* gA = A + bx * BM * lda;
  const half* gB = B + by * BN * ldb;
  const int k_tiles = K / BK;

  float acc[4][8][4];
  #pragma unroll
  for (int i = 0; i < 4; ++i)
    #pragma unroll
    for (int j = 0; j < 8; ++j)
      #pragma unroll
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;

  #pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) {
      load_tile<BM>(sA + s * BM * BK, gA + s * BK, lda, tid);
      load_tile<BN>(sB + s * BN * BK, gB + s * BK, ldb, tid);
    }
    cp_async_commit();
  }
  unsigned a[2][4][4], b[2][8][2];
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  load_frags(a[0], b[0], sA, sB, 0, wm, wn, lane);

  int read = 0, write = STAGES - 1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int next = read == STAGES - 1 ? 0 : read + 1;
    #pragma unroll
    for (int kb = 0; kb < BK / 16; ++kb) {
      const int nb = (kb + 1) % 2;
      if (kb == BK / 16 - 1) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        load_frags(a[nb], b[nb], sA + next * BM * BK, sB + next * BN * BK, 0, wm, wn, lane);
      } else {
        load_frags(a[nb], b[nb], sA + read * BM * BK, sB + read * BN * BK, kb + 1, wm, wn,
                   lane);
      }
      if (kb == 0) {
        const int kn = kt + STAGES - 1;
        if (kn < k_tiles) {
          load_tile<BM>(sA + write * BM * BK, gA + kn * BK, lda, tid);
          load_tile<BN>(sB + write * BN * BK, gB + kn * BK, ldb, tid);
        }
        cp_async_commit();
      }
      #pragma unroll
      for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 8; ++j) mma_16816(acc[i][j], a[kb % 2][i], b[kb % 2][j][0], b[kb % 2][j][1]);
    }
    write = read;
    read = next;
  }

  // epilogue: alpha * acc -> sC (fp16, padded rows) -> 16-byte rows of D, + beta * C
  half* sC = sA;
  cp_async_wait<0>();
  __syncthreads();
  #pragma unroll
  for (int i = 0; i < 4; ++i)
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int r = 16 * wm + 64 * i + lane / 4, c = 8 * wn + 16 * j + 2 * (lane % 4);
      *reinterpret_cast<half2*>(&sC[r * SC_LD + c]) =
          __floats2half2_rn(alpha * acc[i][j][0], alpha * acc[i][j][1]);
      *reinterpret_cast<half2*>(&sC[(r + 8) * SC_LD + c]) =
          __floats2half2_rn(alpha * acc[i][j][2], alpha * acc[i][j][3]);
    }
  __syncthreads();
  #pragma unroll
  for (int it = 0; it < BM / 16; ++it) {
    const int r = tid / 16 + 16 * it, c = 8 * (tid % 16);
    uint4 out = *reinterpret_cast<const uint4*>(&sC[r * SC_LD + c]);
    const int m = bx * BM + r, n = by * BN + c;
    if (beta != 0.f) {
      const uint4 old = *reinterpret_cast<const uint4*>(&C[m * ldc + n]);
      half2* o = reinterpret_cast<half2*>(&out);
      const half2* p = reinterpret_cast<const half2*>(&old);
      #pragma unroll
      for (int v = 0; v < 4; ++v) {
        const float2 x = __half22float2(o[v]), y = __half22float2(p[v]);
        o[v] = __floats2half2_rn(x.x + beta * y.x, x.y + beta * y.y);
      }
    }
    *reinterpret_cast<uint4*>(&D[m * ldd + n]) = out;
  }
}
