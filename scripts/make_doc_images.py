"""Draw the pictures of docs/ into docs/images/ (SVG, and a PNG of each).

    python scripts/make_doc_images.py
"""
from pathlib import Path

import moye
from moye import (CopyAtom, Float32, Float64, Layout, Swizzle, UInt16, UniversalCopy,
                  UniversalFMA, composition, make_tiled_copy, make_tiled_mma)
from moye.viz import render

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"


def pictures():
    yield "layout", Layout((4, 8), (8, 1))
    yield "swizzle", composition(Swizzle(3, 0, 3), Layout((8, 8), (8, 1)))
    yield "tiled_copy", make_tiled_copy(CopyAtom(UniversalCopy(Float64), Float64),
                                        Layout((2, 3), (3, 1)), Layout((2, 3), (1, 2)))
    yield "tiled_mma_fma", make_tiled_mma(UniversalFMA(Float32, Float32, Float32),
                                          Layout((16, 16)))
    if hasattr(moye, "LDSM_U32x4_N"):
        yield "ldmatrix", make_tiled_copy(CopyAtom(moye.LDSM_U32x4_N, UInt16),
                                          Layout((16, 2)), Layout((2, 4)))
    else:
        print("skipped ldmatrix: moye has no LDSM_U32x4_N yet")
    if hasattr(moye, "MMAOP_16x8x8_F32TF32TF32F32_TN"):
        yield "tiled_mma_16x8x8", make_tiled_mma(moye.MMAOP_16x8x8_F32TF32TF32F32_TN)
    else:
        print("skipped tiled_mma_16x8x8: moye has no MMAOP_16x8x8_F32TF32TF32F32_TN yet")


def main():
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name, obj in pictures():
        # 120 ppi: labels stay crisp and the largest PNG under 400 KiB
        for path in (render(obj, IMAGES / f"{name}.svg"),
                     render(obj, IMAGES / f"{name}.png", ppi=120)):
            print(f"{path.relative_to(IMAGES.parent.parent)}  {path.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
