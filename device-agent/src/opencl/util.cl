// Small kernels of the hetero OpenCL backend (OpenCL C 1.2).

// Writes `value` to a host-visible flag. Enqueued after a GEMM on the same
// in-order queue, so the write lands only once the GEMM has finished; the
// host spins on the mapped flag instead of calling clFinish.
__kernel void set_flag(__global volatile uint* flag, const uint value)
{
    if (get_global_id(0) == 0) {
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        *flag = value;
    }
}

// Keeps the device busy for a calibrated while: `iters` dependent
// multiply-adds per work-item. Used to build a busy queue.
__kernel void spin(__global float* out, const int iters)
{
    const int g = get_global_id(0);
    float x = (float)g * 1e-6f;
    for (int i = 0; i < iters; i++)
        x = mad(x, 0.999999f, 1e-7f);
    out[g] = x;
}

// Reads one uint of every 64-byte line of `buf` (one work-item a line).
// Enqueued before a timed GEMM with --cold-cache: the device's caches then
// hold this buffer instead of the GEMM's operands, in clean lines, as after
// other operators' GEMMs, and on a CPU device (PoCL) the device's own
// worker threads are the ones awake when the GEMM starts. `sink` is written
// only if a line holds `never`, which the host never stores, so the reads
// cannot be optimised away.
__kernel void evict(__global const uint* buf, __global uint* sink, const uint never)
{
    const uint v = buf[get_global_id(0) * 16];
    if (v == never)
        sink[0] = v;
}
