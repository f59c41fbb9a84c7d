//! Reduction operations of the caller's (`rdc_op_create`, as `MPI_Op_create`): usable wherever
//! an `rdc_op` is (allreduce, reduce, reduce_scatter, scan, exscan). Contributions are always
//! combined in rank order, so an operation need not be commutative.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use crate::block_jobs::SendReducer;

use crate::p2p::dt_size;
use crate::*;

/// A reduction of the caller's: for each of the `count` elements of `datatype`,
/// `inoutvec[i] = invec[i] op inoutvec[i]`, where `invec` holds the combination of lower ranks'
/// contributions than `inoutvec` (as `MPI_User_function`).
pub type rdc_user_function = Option<
    unsafe extern "C" fn(invec: *const c_void, inoutvec: *mut c_void, count: i64, datatype: c_int),
>;

/// The handle of the first operation `rdc_op_create` makes (predefined ones are below).
const FIRST_USER_OP: c_int = 64;

type UserFunction =
    unsafe extern "C" fn(invec: *const c_void, inoutvec: *mut c_void, count: i64, datatype: c_int);

/// The operations made so far (`None`: freed).
static OPS: Mutex<Vec<Option<UserFunction>>> = Mutex::new(Vec::new());

fn ops() -> std::sync::MutexGuard<'static, Vec<Option<UserFunction>>> {
    OPS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes `function` a reduction operation and sets `*op` to its handle, for any call that
/// takes an `rdc_op`. `commute` says whether the operation is commutative; rdcoll combines in
/// rank order either way. Free it with `rdc_op_free`.
#[no_mangle]
pub extern "C" fn rdc_op_create(
    function: rdc_user_function,
    commute: c_int,
    op: *mut OpArg,
) -> c_int {
    guard(|| {
        let _ = commute;
        let (Some(f), false) = (function, op.is_null()) else {
            return RDC_ERR_NULL;
        };
        let mut table = ops();
        let i = match table.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                table.push(None);
                table.len() - 1
            }
        };
        let Ok(handle) = c_int::try_from(i).map(|i| i + FIRST_USER_OP) else {
            return RDC_ERR_RESOURCES;
        };
        table[i] = Some(f);
        // SAFETY: `op` is non-NULL and points to a writable int (the contract).
        unsafe { *op = OpArg(handle) };
        RDC_SUCCESS
    })
}

/// Frees an operation made by `rdc_op_create` and sets `*op` to `RDC_OP_NULL`; a predefined or freed one
/// is `RDC_ERR_OP`.
#[no_mangle]
pub extern "C" fn rdc_op_free(op: *mut OpArg) -> c_int {
    guard(|| {
        if op.is_null() {
            return RDC_ERR_NULL;
        }
        // SAFETY: `op` is non-NULL and points to an `rdc_op` (the contract).
        let h = unsafe { *op }.0;
        let mut table = ops();
        let slot = usize::try_from(h - FIRST_USER_OP)
            .ok()
            .and_then(|i| table.get_mut(i));
        match slot {
            Some(f @ Some(_)) => {
                *f = None;
                // SAFETY: as above.
                unsafe { *op = OpArg(rdc_op::RDC_OP_NULL as c_int) };
                RDC_SUCCESS
            }
            _ => RDC_ERR_OP,
        }
    })
}

/// Whether `op` is a handle `rdc_op_create` hands out (live or freed), not a predefined one.
pub(crate) fn is_user_op(op: c_int) -> bool {
    op >= FIRST_USER_OP
}

/// The byte-level reducer of user operation `op` on `dt`; `None` if `op` is not one made by
/// `rdc_op_create` (a predefined one, or an unknown number); `RDC_ERR_OP` if it was freed.
pub(crate) fn user_reducer(op: c_int, dt: c_int) -> Option<Result<SendReducer, c_int>> {
    let i = usize::try_from(op.checked_sub(FIRST_USER_OP)?).ok()?;
    let f = match ops().get(i) {
        Some(Some(f)) => *f,
        _ => return Some(Err(RDC_ERR_OP)),
    };
    let size = match dt_size(dt) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    Some(Ok(Box::new(move |acc: &mut [u8], x: &[u8]| {
        // `acc op x` into acc: the function writes its second operand, so `x` goes into an
        // aligned copy first.
        let mut scratch = vec![0u128; x.len().div_ceil(16)];
        let tmp = &mut bytemuck::cast_slice_mut::<u128, u8>(&mut scratch)[..x.len()];
        tmp.copy_from_slice(x);
        let count = (acc.len() / size) as i64;
        // SAFETY: both buffers hold `count` elements of `dt`, as the caller's function expects;
        // it reads `acc` and writes `tmp` only.
        unsafe {
            f(
                acc.as_ptr() as *const c_void,
                tmp.as_mut_ptr() as *mut c_void,
                count,
                dt,
            )
        };
        acc.copy_from_slice(tmp);
    })))
}
