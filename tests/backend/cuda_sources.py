"""Hand-written CUDA C++ for the backend tests: what the code generator will
emit (fp16/bf16/fp8 types, cp.async, mma.sync, wgmma, setmaxnreg, TMA,
clusters), written out so NVRTC, the cache and the driver are tested alone."""

# Needs sm_80: half/bf16/fp8 conversions, cp.async, mma.sync; and plain kernels
# for parameter passing and dynamic shared memory.
SM80 = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

struct __align__(64) Desc { int v[32]; };           // 128 bytes, like a CUtensorMap

// Writes each parameter at a fixed offset of `out`, so the host can check
// every byte that cuLaunchKernel passed.
extern "C" __global__ void echo_kernel(unsigned char* out, signed char a, short b, int c,
                                       long long d, float e, double f,
                                       unsigned long long p, Desc desc, unsigned char g) {
  *reinterpret_cast<signed char*>(out + 0) = a;
  *reinterpret_cast<short*>(out + 2) = b;
  *reinterpret_cast<int*>(out + 4) = c;
  *reinterpret_cast<long long*>(out + 8) = d;
  *reinterpret_cast<float*>(out + 16) = e;
  *reinterpret_cast<double*>(out + 24) = f;
  *reinterpret_cast<unsigned long long*>(out + 32) = p;
  for (int i = 0; i < 32; ++i) reinterpret_cast<int*>(out + 64)[i] = desc.v[i];
  out[192] = g;
}

extern "C" __global__ void scale_kernel(float* out, const float* in, int n, float alpha) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __fmul_rn(in[i], alpha);
}

extern "C" __global__ void convert_kernel(const float* in, __half* h, __nv_bfloat16* b,
                                          __nv_fp8_e4m3* f8, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    h[i] = __float2half_rn(in[i]);
    b[i] = __float2bfloat16_rn(in[i]);
    f8[i] = __nv_fp8_e4m3(in[i]);
  }
}

// One warp: A (16x16, row-major) and B (16x8, stored as its 8x16 transpose)
// reach shared memory by cp.async, then D = A * B with mma.sync m16n8k16.
extern "C" __global__ void mma_kernel(const __half* A, const __half* Bt, float* D) {
  __shared__ __align__(16) __half As[16 * 16];
  __shared__ __align__(16) __half Bs[8 * 16];
  int lane = threadIdx.x;
  {
    unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(As + lane * 8));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(A + lane * 8));
  }
  if (lane < 16) {
    unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(Bs + lane * 8));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(Bt + lane * 8));
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  __syncthreads();
  int g = lane >> 2, t = lane & 3;
  const unsigned* a32 = reinterpret_cast<const unsigned*>(As);
  const unsigned* b32 = reinterpret_cast<const unsigned*>(Bs);
  unsigned a0 = a32[(g * 16 + 2 * t) / 2], a1 = a32[((g + 8) * 16 + 2 * t) / 2];
  unsigned a2 = a32[(g * 16 + 2 * t + 8) / 2], a3 = a32[((g + 8) * 16 + 2 * t + 8) / 2];
  unsigned b0 = b32[(g * 16 + 2 * t) / 2], b1 = b32[(g * 16 + 2 * t + 8) / 2];
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  D[g * 8 + 2 * t] = d0;
  D[g * 8 + 2 * t + 1] = d1;
  D[(g + 8) * 8 + 2 * t] = d2;
  D[(g + 8) * 8 + 2 * t + 1] = d3;
}

extern "C" __global__ void reverse_kernel(float* out, const float* in, int n) {
  extern __shared__ float buf[];
  for (int j = threadIdx.x; j < n; j += blockDim.x) buf[j] = in[j];
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x) out[j] = buf[n - 1 - j];
}

template <int N>
__global__ void add_kernel(int* x) { x[threadIdx.x] += N; }
"""

# Needs sm_90 or later: clusters (launched with cuLaunchKernelEx).
CLUSTER = r"""
extern "C" __global__ void cluster_kernel(int* out) {
  unsigned rank, nrank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(nrank));
  asm volatile("barrier.cluster.arrive;\nbarrier.cluster.wait;\n" ::: "memory");
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int>(rank + 100 * nrank);
}
"""

# Needs sm_90a: wgmma and setmaxnreg exist only on the arch-specific target;
# TMA and clusters on sm_90.
SM90A = r"""
#include <cuda_fp16.h>

struct __align__(64) TmaDescriptor { unsigned long long v[16]; };

extern "C" __global__ void __launch_bounds__(128) wgmma_kernel(float* out,
                                                               unsigned long long desc_a,
                                                               unsigned long long desc_b) {
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
      "{%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "l"(desc_a), "l"(desc_b), "r"(1));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  float* o = out + threadIdx.x * 4;
  o[0] = d0; o[1] = d1; o[2] = d2; o[3] = d3;
}

// Loads the 32x32 float tile at column x0, row y0 of a row-major matrix by TMA.
extern "C" __global__ void tma_kernel(const __grid_constant__ TmaDescriptor desc, float* out,
                                      int x0, int y0) {
  __shared__ __align__(128) float tile[32 * 32];
  __shared__ __align__(8) unsigned long long bar;
  unsigned bar_s = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  unsigned tile_s = static_cast<unsigned>(__cvta_generic_to_shared(tile));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(bar_s));
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(bar_s), "r"(32 * 32 * 4));
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3}], [%4];\n"
        :: "r"(tile_s), "l"(reinterpret_cast<unsigned long long>(&desc)), "r"(x0), "r"(y0),
           "r"(bar_s) : "memory");
  }
  __syncthreads();
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" :: "r"(bar_s), "r"(0) : "memory");
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) out[i] = tile[i];
}
""" + CLUSTER

SM80_KERNELS = ["echo_kernel", "scale_kernel", "convert_kernel", "mma_kernel",
                "reverse_kernel", "add_kernel<7>"]
SM90A_KERNELS = ["wgmma_kernel", "tma_kernel", "cluster_kernel"]
