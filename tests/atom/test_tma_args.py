"""The arguments moye passes to cuTensorMapEncodeTiled, computed without a
GPU, and the clear errors for tiles and arrays TMA cannot take."""
import numpy as np
import pytest

import moye
from moye import Layout, MoyeError, Swizzle, composition
from moye.atom.arch.tma import engine_offsets, layout_offsets, tensor_map_args


def sw128(rows, cols, ebytes):
    return composition(Swizzle(3, 4 - (ebytes.bit_length() - 1), 3),
                       Layout((rows, cols), (cols, 1)))


def test_row_major_fp16_128b_swizzle():
    args, perm = tensor_map_args("Float16", (1000, 520), (528, 1), 0x1000, sw128(64, 64, 2))
    assert perm == (1, 0)
    assert args.data_type == "FLOAT16" and args.rank == 2 and args.global_address == 0x1000
    assert args.global_dim == (520, 1000)
    assert args.global_strides == (1056,)
    assert args.box_dim == (64, 64) and args.element_strides == (1, 1)
    assert args.swizzle == "128B" and args.interleave == "NONE" and args.oob_fill == "NONE"
    assert args.box_bytes == 8192


@pytest.mark.parametrize("bits, name", [(1, "32B"), (2, "64B"), (3, "128B")])
def test_float32_swizzle_modes(bits, name):
    cols = (16 << bits) // 4
    tile = composition(Swizzle(bits, 2, 3), Layout((16, cols), (cols, 1)))
    args, _ = tensor_map_args("Float32", (64, 256), (256, 1), 0, tile)
    assert args.swizzle == name and args.box_dim == (cols, 16) and args.data_type == "FLOAT32"


def test_column_major_and_3d():
    # column-major (M, N): mode 0 is the contiguous one, the box is (bM, bN) as it is
    args, perm = tensor_map_args("Float32", (100, 50), (1, 104), 0, Layout((32, 8)))
    assert perm == (0, 1) and args.global_dim == (100, 50) and args.global_strides == (416,)
    assert args.box_dim == (32, 8)
    # (batch, M, N) row-major: dimensions N, M, batch
    args, perm = tensor_map_args("BFloat16", (3, 40, 64), (2560, 64, 1), 0,
                                 Layout((2, 8, 64), (512, 64, 1)))
    assert perm == (2, 1, 0) and args.global_dim == (64, 40, 3)
    assert args.global_strides == (128, 5120) and args.box_dim == (64, 8, 2)
    assert args.data_type == "BFLOAT16"


def test_types_without_a_tma_name_move_as_unsigned_words():
    assert tensor_map_args("Int8", (64, 64), (64, 1), 0, Layout((16, 16), (16, 1)))[0] \
        .data_type == "UINT8"
    assert tensor_map_args("Int16", (64, 64), (64, 1), 0, Layout((16, 8), (8, 1)))[0] \
        .data_type == "UINT16"


def test_engine_offsets_match_the_swizzled_layout():
    tile = sw128(8, 64, 2)
    want = engine_offsets((8, 64), (1, 0), 2, 3)
    assert np.array_equal(want, layout_offsets(tile, (8, 64)))
    assert want[1, 0] == 72 and want[1, 8] == 64         # row 1: its 16-byte chunks XOR 1


@pytest.mark.parametrize("shape, strides, tile, match", [
    ((64, 64), (64, 1), composition(Swizzle(3, 4, 3), Layout((8, 64), (64, 1))),
     "Sw<3,4,3> of smem_layout on 16-bit elements is Sw<3,5,3> on bytes"),
    ((64, 64), (64, 1), composition(Swizzle(2, 3, 3), Layout((8, 64), (64, 1))),
     "64B swizzle the tile's contiguous mode 1 must be 64 bytes"),
    ((64, 512), (512, 1), Layout((8, 300), (300, 1)), "mode 1 of smem_layout .* has 300 "
     "elements; a TMA box has 1 to 256"),
    ((64, 100), (100, 1), Layout((8, 64), (64, 1)), "stride 100 of mode 0 is 200 bytes; TMA "
     "needs positive strides that are multiples of 16 bytes"),
    ((64, 64), (1, 64), Layout((8, 64), (64, 1)), r"puts element \(0, 1\) at 1, where TMA "
     "writes it at 8"),
    ((64, 64), (64, 2), Layout((8, 8), (8, 1)), "no mode of stride 1"),
    ((64, 64), (64, 1), Layout((8, 4), (4, 1)), "box rows are multiples of 16 bytes"),
    ((64, 64), (64, 1), Layout(64), "smem_layout 64:1 has 1 modes, but the global array has 2"),
])
def test_errors_name_the_argument(shape, strides, tile, match):
    with pytest.raises(MoyeError, match=match):
        tensor_map_args("Float16", shape, strides, 0, tile)


def test_misaligned_address():
    with pytest.raises(MoyeError, match="address 0x8 is not 16-byte aligned"):
        tensor_map_args("Float16", (64, 64), (64, 1), 8, Layout((8, 64), (64, 1)))


def test_make_tma_copy_and_the_driver_call():
    a = np.zeros((100, 64), np.float16)
    tma = moye.make_tma_copy(moye.TMA_LOAD, a, sw128(8, 64, 2))
    assert tma.tile == (8, 64) and tma.bytes == 1024 and tma.args.global_address == a.ctypes.data
    pytest.importorskip("cuda.bindings")
    from cuda.bindings import driver as cu
    from moye.backend.cuda.driver import tensor_map_call
    call = tensor_map_call(tma.args)
    assert all(type(x) is cu.cuuint64_t for x in call[3] + call[4])
    assert all(type(x) is cu.cuuint32_t for x in call[5] + call[6])
    call = call[:3] + tuple([int(x) for x in xs] for xs in call[3:7]) + call[7:]
    assert call == (cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, a.ctypes.data,
                    [64, 100], [128], [64, 8], [1, 1],
                    cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                    cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                    cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                    cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)


def test_make_tma_copy_bad_arguments():
    with pytest.raises(MoyeError, match="op must be TMA_LOAD, TMA_STORE or TMA_REDUCE_ADD"):
        moye.make_tma_copy("load", np.zeros((8, 8), np.float32), Layout((8, 8), (8, 1)))
    with pytest.raises(MoyeError, match="gmem must be an array"):
        moye.make_tma_copy(moye.TMA_LOAD, [1, 2], Layout(2))


def test_a_tiles_placement_is_checked_once_per_layout_and_a_refusal_every_time():
    from moye.atom.arch import tma
    tile = sw128(64, 64, 2)
    tensor_map_args("Float16", (512, 512), (512, 1), 0, tile)
    before = tma._check_tile.cache_info()
    args, _ = tensor_map_args("Float16", (256, 1024), (1024, 1), 0x2000, tile)  # a new array
    after = tma._check_tile.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    assert args.global_dim == (1024, 256) and args.global_address == 0x2000
    bad = composition(Swizzle(3, 4, 3), Layout((8, 64), (64, 1)))
    for _ in range(2):          # errors are not remembered as results
        with pytest.raises(MoyeError, match="Sw<3,5,3> on bytes"):
            tensor_map_args("Float16", (64, 64), (64, 1), 0, bad)
