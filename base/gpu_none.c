/* Built when seqkv is configured without CUDA (-Dcuda=disabled, or auto
 * with no nvcc): the GPU entry points report that no device exists, and
 * callers take their CPU paths. */
#include "skv_base.h"

int skv_gpu_available(void)
{
    return 0;
}

const char *skv_gpu_describe(void)
{
    return "built without CUDA";
}

int skv_gpu_cast_from_f32(seqkv_dtype dt, void *dst, const float *src, size_t n)
{
    (void)dt, (void)dst, (void)src, (void)n;
    return skv_error(SKV_ERR_NO_DEVICE, "this build of seqkv has no CUDA support");
}
