"""Software prefetch for the compiled kernels: ``prefetch(a, i)`` and ``prefetch_row(a, r)`` ask
the CPU to bring ``a[i]`` (the start of row ``r`` of a 2-d array) into cache, without waiting.

For loops whose next reads are known some iterations ahead but land at random in arrays larger than
the caches, such as the auction's queue of bidders (:func:`._auction.auction`): the hardware
prefetchers follow strides, not a queue.  A hint only (LLVM's ``llvm.prefetch``: read, high
temporal locality, data cache); it changes no value, and an address past the array is never
formed by the callers.  Numba intrinsics; no Dask.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch", "prefetch_row"]

# the intrinsic's name carries its pointer type: typed pointers until LLVM 15, opaque after
_NAME = "llvm.prefetch.p0" if llvm.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"


def _emit(builder, ptr):
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), _NAME)
    # read (0), highest temporal locality (3), data cache (1)
    builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])


@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint: ``arr[idx]`` (1-d array, integer index in bounds) will be read soon."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        _emit(builder, cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False))
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@intrinsic
def prefetch_row(typingctx, arr, row):
    """Hint: row ``row`` (in bounds) of the 2-d C-ordered array ``arr`` will be read soon: its first
    and its last element, so a short row across two cache lines comes whole."""
    if not isinstance(arr, types.Array) or arr.ndim != 2 or not isinstance(row, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        _emit(builder, cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], zero], wraparound=False))
        shape = cgutils.unpack_tuple(builder, ary.shape, 2)
        last = builder.sub(shape[1], context.get_constant(types.intp, 1))
        with builder.if_then(builder.icmp_signed(">", last, zero)):
            _emit(builder, cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], last], wraparound=False))
        return context.get_dummy_value()

    return types.void(arr, row), codegen
