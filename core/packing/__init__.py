"""Weight packers in numpy (blocked NCHW[x]c, Winograd, MatMul panels): below graph and kernels, used by both."""
