"""NVRTC compiles of an op's kernel variants, shared by the ops' tests."""
from moye.compiler.frontend import BACKENDS


def compile_variants(variants, arch):
    """Compile each (kernel, args, plan) of `variants` for `arch` with NVRTC
    (no GPU needed); cluster variants only for sm_90 and later."""
    for kern, args, p in variants:
        if p.cluster > 1 and arch == "sm_80":
            continue                           # clusters are sm_90
        kernel = kern.trace(*args, block=p.threads)[0]
        BACKENDS["cuda"].compile_only(kernel, (p.threads, 1, 1), arch)
