"""A short tour of layouts: build, evaluate, compose, divide, multiply, print.

    python -m moye.examples.layout_tour
"""
from moye import (Layout, Swizzle, blocked_product, complement, composition, logical_divide,
                  make_layout, print_layout, raked_product, right_inverse, zipped_divide)


def main():
    print("A layout maps coordinates to offsets: shape:stride, column-major by default.")
    a = Layout((4, 6))
    print(f"  Layout((4, 6))                 = {a}")
    print(f"  a(5), a(1, 1), a((1, 1))       = {a(5)}, {a(1, 1)}, {a((1, 1))}")
    print_layout(Layout((4, 6), (6, 1)))

    print("\nComposition: a layout of a layout (lhs o rhs).")
    print(f"  composition((6,2):(8,2), (4,3):(3,1)) = "
          f"{composition(Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1)))}")

    print("\nComplement: what a layout leaves out.")
    print(f"  complement(4:2, 24)            = {complement(Layout(4, 2), 24)}")

    print("\nDivision: tiles of a layout. An 8x8 matrix into 2x4 tiles:")
    tiles = zipped_divide(Layout((8, 8)), (2, 4))
    print(f"  zipped_divide((8,8), (2,4))    = {tiles}   # ((tile), (tiles))")
    print(f"  logical_divide((3,4):(1,10),2) = {logical_divide(Layout((3, 4), (1, 10)), 2)}")

    print("\nProducts: a block repeated over a grid.")
    block, grid = Layout((2, 2), (1, 2)), Layout((3, 4), (4, 1))
    print(f"  blocked_product                = {blocked_product(block, grid)}")
    print(f"  raked_product                  = {raked_product(block, grid)}")

    print("\nThe thread-value layout of a TiledCopy: 6 threads (2,3):(3,1) each copying")
    print("values (2,3):(1,2) of a 4x9 tile. Which thread and value land where:")
    thr, val = Layout((2, 3), (3, 1)), Layout((2, 3), (1, 2))
    tv = right_inverse(raked_product(thr, val))
    print(f"  TV layout = {composition(tv, make_layout((6, 6)))}")

    print("\nA swizzle spreads the rows of an 8x8 shared-memory tile over banks:")
    print_layout(composition(Swizzle(3, 0, 3), Layout((8, 8), (8, 1))))


if __name__ == "__main__":
    main()
