/* Optional CUDA paths. Linked with nvcc's static cudart; with no driver or
 * no device, cudaGetDeviceCount fails and every entry point returns
 * SKV_ERR_NO_DEVICE so callers fall back to the CPU. The casts share
 * dtype_impl.h with the CPU, so results are bit-identical. */
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "skv_base.h"
}
#include "skv_dtype_impl.h"

static int g_state = -1; /* -1 unknown, 0 none, 1 available */
static char g_desc[256] = "not probed";

extern "C" int skv_gpu_available(void)
{
    if (g_state < 0) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess || n == 0) {
            snprintf(g_desc, sizeof g_desc, "no CUDA device (%s)",
                     e != cudaSuccess ? cudaGetErrorString(e) : "count is 0");
            g_state = 0;
        } else {
            cudaDeviceProp p;
            if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
                snprintf(g_desc, sizeof g_desc, "%.160s (sm_%d%d, %zu MiB)", p.name, p.major,
                         p.minor, (size_t)(p.totalGlobalMem >> 20));
            else
                snprintf(g_desc, sizeof g_desc, "CUDA device 0");
            g_state = 1;
        }
    }
    return g_state;
}

extern "C" const char *skv_gpu_describe(void)
{
    skv_gpu_available();
    return g_desc;
}

__global__ void k_cast(int dt, uint8_t *dst, const float *src, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = src[i];
    switch (dt) {
    case SEQKV_DT_F32: {
        uint32_t u = skv__bits(x);
        dst[4 * i] = (uint8_t)u;
        dst[4 * i + 1] = (uint8_t)(u >> 8);
        dst[4 * i + 2] = (uint8_t)(u >> 16);
        dst[4 * i + 3] = (uint8_t)(u >> 24);
        break;
    }
    case SEQKV_DT_BF16: {
        uint16_t h = skv__f32_to_bf16(x);
        dst[2 * i] = (uint8_t)h;
        dst[2 * i + 1] = (uint8_t)(h >> 8);
        break;
    }
    case SEQKV_DT_F16: {
        uint16_t h = skv__f32_to_f16(x);
        dst[2 * i] = (uint8_t)h;
        dst[2 * i + 1] = (uint8_t)(h >> 8);
        break;
    }
    default:
        dst[i] = skv__f32_to_f8e4m3(x);
    }
}

extern "C" int skv_gpu_cast_from_f32(seqkv_dtype dt, void *dst, const float *src, size_t n)
{
    if (!skv_gpu_available())
        return skv_error(SKV_ERR_NO_DEVICE, "%s", g_desc);
    size_t es = skv_dtype_size(dt);
    if (dt == SEQKV_DT_I32 || es == 0)
        return skv_error(SKV_ERR_ARG, "cannot cast float32 to %s", skv_dtype_name(dt));
    if (n == 0)
        return SKV_OK;
    float *d_src = NULL;
    uint8_t *d_dst = NULL;
    cudaError_t e = cudaMalloc(&d_src, n * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMalloc(&d_dst, n * es);
    if (e == cudaSuccess)
        e = cudaMemcpy(d_src, src, n * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        unsigned blocks = (unsigned)((n + 255) / 256);
        k_cast<<<blocks, 256>>>((int)dt, d_dst, d_src, n);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(dst, d_dst, n * es, cudaMemcpyDeviceToHost);
    cudaFree(d_src);
    cudaFree(d_dst);
    if (e != cudaSuccess)
        return skv_error(SKV_ERR_NO_DEVICE, "CUDA: %s", cudaGetErrorString(e));
    return SKV_OK;
}
