// FP64 Tensor Core helper of mpsolve (kernels/cuda/dmma.py): one warp-collective
// D = A * B + C step of PTX mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 (SASS DMMA on
// sm_80/sm_90), on the fragments of the calling lane.  Every lane of the warp must call it,
// convergently.  Numba ABI: int f(ret*, args...) returning 0; the return value is numba's
// UniTuple(float64, 2), laid out as double[2]: (d0, d1).
//
// Fragment layout (PTX ISA, "Matrix Fragments for mma.m8n8k4 with .f64"): lane l,
// g = l / 4 (groupID), q = l % 4 (threadID_in_group):
//   A (8x4, row): a = A[g][q];   B (4x8, col): b = B[q][g];
//   C, D (8x8):   (c0, c1) = C[g][2q], C[g][2q + 1].
extern "C" __device__ int
mpsolve_dmma_m8n8k4(double *ret, double a, double b, double c0, double c1)
{
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 "
                 "{%0, %1}, {%2}, {%3}, {%0, %1};\n"
                 : "+d"(c0), "+d"(c1)
                 : "d"(a), "d"(b));
    ret[0] = c0;
    ret[1] = c1;
    return 0;
}
