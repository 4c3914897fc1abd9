// Hand-written twin of moye/examples/sgemm.py (make_config() defaults), for
// benchmarks/compile_time.py: the same algorithm, tiles and threads.
// C = A * B^T, float32, all column-major: A (M, K), B (N, K), C (M, N).
// 128x128x32 block tile, 3 cp.async stages (96 KiB of dynamic shared memory),
// 256 threads in a 16x16 grid (warps of 4 x 8); each thread owns 8 x 8
// accumulators: rows 64*i + 4*tm + (0..3), columns 64*j + 4*tn + (0..3).
// Fragments of k + 1 are read from shared memory while k is multiplied.
// M, N multiples of 128, K of 32.
#define BM 128
#define BN 128
#define BK 32
#define STAGES 3

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_stages() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2) : "memory");
}

// one (128, 32) tile of A or B: thread t copies rows 4*(t%32).. of columns t/32 + 8*i
__device__ __forceinline__ void load_tile(float* s, const float* g, int ld, int tid) {
  #pragma unroll
  for (int i = 0; i < BK / 8; ++i) {
    int m = 4 * (tid % 32), k = tid / 32 + 8 * i;
    cp_async16(s + k * BM + m, g + k * ld + m);
  }
}

__device__ __forceinline__ void load_frag(float (&a)[8], float (&b)[8], const float* sA,
                                          const float* sB, int k, int tm, int tn) {
  #pragma unroll
  for (int i = 0; i < 2; ++i) {
    *(float4*)&a[4 * i] = *(const float4*)&sA[k * BM + 64 * i + 4 * tm];
    *(float4*)&b[4 * i] = *(const float4*)&sB[k * BN + 64 * i + 4 * tn];
  }
}

extern "C" __global__ void __launch_bounds__(256, 2)   // two blocks per SM, as moye's
sgemm_twin(const float* A, const float* B, float* C, int M, int N, int K, int lda, int ldb,
           int ldc) {
  extern __shared__ __align__(16) float smem[];
  float* sA = smem;                          // [STAGES][BK][BM]
  float* sB = smem + STAGES * BK * BM;       // [STAGES][BK][BN]
  const int tid = threadIdx.x;
  const int tm = tid % 4 + 4 * (tid / 32 % 4), tn = tid / 4 % 8 + 8 * (tid / 128);
  const float* gA = A + blockIdx.x * BM;
  const float* gB = B + blockIdx.y * BN;
  const int k_tiles = K / BK;

  float acc[8][8];
  #pragma unroll
  for (int i = 0; i < 8; ++i)
    #pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  #pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) {
      load_tile(sA + s * BK * BM, gA + s * BK * lda, lda, tid);
      load_tile(sB + s * BK * BN, gB + s * BK * ldb, ldb, tid);
    }
    cp_async_commit();
  }
  float a[2][8], b[2][8];
  cp_async_wait_stages();
  __syncthreads();
  load_frag(a[0], b[0], sA, sB, 0, tm, tn);

  int read = 0, write = STAGES - 1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int next = read == STAGES - 1 ? 0 : read + 1;
    #pragma unroll
    for (int kb = 0; kb < BK; ++kb) {
      if (kb == BK - 1) {
        cp_async_wait_stages();
        __syncthreads();
        load_frag(a[(kb + 1) % 2], b[(kb + 1) % 2], sA + next * BK * BM, sB + next * BK * BN, 0,
                  tm, tn);
      } else {
        load_frag(a[(kb + 1) % 2], b[(kb + 1) % 2], sA + read * BK * BM, sB + read * BK * BN,
                  kb + 1, tm, tn);
      }
      if (kb == 0) {
        const int kn = kt + STAGES - 1;
        if (kn < k_tiles) {
          load_tile(sA + write * BK * BM, gA + kn * BK * lda, lda, tid);
          load_tile(sB + write * BK * BN, gB + kn * BK * ldb, ldb, tid);
        }
        cp_async_commit();
      }
      #pragma unroll
      for (int i = 0; i < 8; ++i)
        #pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[kb % 2][i], b[kb % 2][j], acc[i][j]);
    }
    write = read;
    read = next;
  }

  #pragma unroll
  for (int j = 0; j < 8; ++j)
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int m = blockIdx.x * BM + 64 * i + 4 * tm, n = blockIdx.y * BN + 64 * (j / 4) + 4 * tn + j % 4;
      *(float4*)&C[m + n * ldc] =
          make_float4(acc[4 * i][j], acc[4 * i + 1][j], acc[4 * i + 2][j], acc[4 * i + 3][j]);
    }
}
