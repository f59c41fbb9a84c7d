//! Reduction operations and the element types they apply to: sum, product, min, max, the
//! logical and bitwise and/or/xor, on `i8`-`i64`, `u8`-`u64`, `f32`, `f64` and the complex
//! [`Complex32`] and [`Complex64`] (integers wrap on overflow instead of panicking; logical and
//! bitwise operations are for integers, min and max not for complex numbers, as in MPI), plus a
//! caller's own closure.

use bytemuck::Pod;
use num_complex::{Complex32, Complex64};

use crate::error::{CollError, Result};

/// A predefined reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `a + b` (integers wrap).
    Sum,
    /// `a * b` (integers wrap).
    Prod,
    /// The smaller.
    Min,
    /// The larger.
    Max,
    /// 1 if both are nonzero, else 0.
    LogicalAnd,
    /// 1 if either is nonzero, else 0.
    LogicalOr,
    /// 1 if exactly one is nonzero, else 0.
    LogicalXor,
    /// `a & b`.
    BitAnd,
    /// `a | b`.
    BitOr,
    /// `a ^ b`.
    BitXor,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 10] = [
        Op::Sum,
        Op::Prod,
        Op::Min,
        Op::Max,
        Op::LogicalAnd,
        Op::LogicalOr,
        Op::LogicalXor,
        Op::BitAnd,
        Op::BitOr,
        Op::BitXor,
    ];

    /// Whether the operation is only for integers.
    pub fn integers_only(self) -> bool {
        matches!(
            self,
            Op::LogicalAnd | Op::LogicalOr | Op::LogicalXor | Op::BitAnd | Op::BitOr | Op::BitXor
        )
    }

    /// Whether the operation is defined on elements of `T` (what [`check`] refuses otherwise).
    pub fn applies_to<T: Element>(self) -> bool {
        let needs_order = matches!(self, Op::Min | Op::Max);
        let needs_integers = self.integers_only();
        (T::ORDERED || !needs_order) && (!T::FLOAT || !needs_integers)
    }
}

/// An element type the predefined operations apply to.
pub trait Element: Pod + Send + Sync {
    /// Whether it is a floating-point type, real or complex (no logical or bitwise operations).
    const FLOAT: bool;
    /// Whether its values are ordered (min and max apply): not so for complex numbers.
    const ORDERED: bool = true;
    /// `acc[i] = acc[i] op b[i]` for every `i`.
    fn combine(op: Op, acc: &mut [Self], b: &[Self]);
}

/// `acc[i] = f(acc[i], b[i])` in a loop the compiler can vectorise (one per operation).
macro_rules! each {
    ($acc:expr, $b:expr, |$x:ident, $y:ident| $e:expr) => {
        for (a, &$y) in $acc.iter_mut().zip($b) {
            let $x = *a;
            *a = $e;
        }
    };
}

macro_rules! integer {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const FLOAT: bool = false;
            fn combine(op: Op, acc: &mut [Self], b: &[Self]) {
                match op {
                    Op::Sum => each!(acc, b, |x, y| x.wrapping_add(y)),
                    Op::Prod => each!(acc, b, |x, y| x.wrapping_mul(y)),
                    Op::Min => each!(acc, b, |x, y| x.min(y)),
                    Op::Max => each!(acc, b, |x, y| x.max(y)),
                    Op::LogicalAnd => each!(acc, b, |x, y| ((x != 0) && (y != 0)) as $t),
                    Op::LogicalOr => each!(acc, b, |x, y| ((x != 0) || (y != 0)) as $t),
                    Op::LogicalXor => each!(acc, b, |x, y| ((x != 0) != (y != 0)) as $t),
                    Op::BitAnd => each!(acc, b, |x, y| x & y),
                    Op::BitOr => each!(acc, b, |x, y| x | y),
                    Op::BitXor => each!(acc, b, |x, y| x ^ y),
                }
            }
        }
    )*};
}
integer!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const FLOAT: bool = true;
            fn combine(op: Op, acc: &mut [Self], b: &[Self]) {
                match op {
                    Op::Sum => each!(acc, b, |x, y| x + y),
                    Op::Prod => each!(acc, b, |x, y| x * y),
                    Op::Min => each!(acc, b, |x, y| x.min(y)),
                    Op::Max => each!(acc, b, |x, y| x.max(y)),
                    // Refused before any data moves (see `check`).
                    _ => {}
                }
            }
        }
    )*};
}
float!(f32, f64);

macro_rules! complex {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const FLOAT: bool = true;
            const ORDERED: bool = false;
            fn combine(op: Op, acc: &mut [Self], b: &[Self]) {
                match op {
                    Op::Sum => each!(acc, b, |x, y| x + y),
                    Op::Prod => each!(acc, b, |x, y| x * y),
                    // Refused before any data moves (see `check`).
                    _ => {}
                }
            }
        }
    )*};
}
complex!(Complex32, Complex64);

/// Refuses an operation the element type does not have.
pub fn check<T: Element>(op: Op) -> Result<()> {
    if op.applies_to::<T>() {
        return Ok(());
    }
    let kind = if T::ORDERED {
        "floating-point"
    } else {
        "complex"
    };
    Err(CollError::InvalidArgument(format!(
        "{op:?} is not defined on {kind} elements"
    )))
}

/// How the algorithms combine two byte buffers of whole elements: `acc op= b`. `acc` is
/// aligned for the element type; `b` may not be.
pub type Reducer<'a> = dyn Fn(&mut [u8], &[u8]) + Sync + 'a;

/// `b`'s elements in a buffer aligned for `T`.
fn aligned_copy<T: Pod>(b: &[u8]) -> Vec<T> {
    let count = b.len() / std::mem::size_of::<T>().max(1);
    let mut v = vec![T::zeroed(); count];
    let bytes = count * std::mem::size_of::<T>();
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&b[..bytes]);
    v
}

/// The byte-level reducer of element-wise `f` on `T`.
pub fn reducer<T: Pod, F: Fn(&mut T, &T) + Sync>(f: F) -> impl Fn(&mut [u8], &[u8]) + Sync {
    move |acc: &mut [u8], b: &[u8]| {
        if acc.is_empty() {
            return; // an empty block may sit at any address (C's `&mut []` of bytes)
        }
        let acc: &mut [T] = bytemuck::cast_slice_mut(acc);
        match bytemuck::try_cast_slice::<u8, T>(b) {
            Ok(b) => acc.iter_mut().zip(b).for_each(|(x, y)| f(x, y)),
            Err(_) => {
                // Data bottom-filled at an odd place: one aligned copy.
                let b: Vec<T> = aligned_copy(b);
                acc.iter_mut().zip(&b).for_each(|(x, y)| f(x, y));
            }
        }
    }
}

/// The byte-level reducer of predefined `op` on `T`.
pub fn op_reducer<T: Element>(op: Op) -> impl Fn(&mut [u8], &[u8]) + Sync {
    move |acc: &mut [u8], b: &[u8]| {
        if acc.is_empty() {
            return; // as in `reducer`
        }
        let acc: &mut [T] = bytemuck::cast_slice_mut(acc);
        match bytemuck::try_cast_slice::<u8, T>(b) {
            Ok(b) => T::combine(op, acc, b),
            Err(_) => {
                let b: Vec<T> = aligned_copy(b);
                T::combine(op, acc, &b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_ops() {
        let mut a = [5i32, -3, 0, i32::MAX];
        i32::combine(Op::Sum, &mut a, &[1, 1, 0, 1]);
        assert_eq!(a, [6, -2, 0, i32::MIN]);
        let mut l = [0u8, 1, 2, 0];
        u8::combine(Op::LogicalXor, &mut l, &[0, 0, 3, 7]);
        assert_eq!(l, [0, 1, 0, 1]);
        let mut b = [0b1100u16];
        u16::combine(Op::BitAnd, &mut b, &[0b1010]);
        assert_eq!(b, [0b1000]);
        assert!(check::<f64>(Op::BitOr).is_err());
        assert!(check::<f64>(Op::Max).is_ok());
    }

    #[test]
    fn complex_numbers_add_and_multiply_but_have_no_order() {
        let mut a = [Complex64::new(1.0, 2.0), Complex64::new(-0.5, 0.0)];
        Complex64::combine(Op::Prod, &mut a, &[Complex64::new(3.0, -1.0); 2]);
        assert_eq!(a, [Complex64::new(5.0, 5.0), Complex64::new(-1.5, 0.5)]);
        let mut s = [Complex32::new(1.0, 2.0)];
        Complex32::combine(Op::Sum, &mut s, &[Complex32::new(0.25, -4.0)]);
        assert_eq!(s, [Complex32::new(1.25, -2.0)]);
        for op in Op::ALL {
            let defined = matches!(op, Op::Sum | Op::Prod);
            assert_eq!(check::<Complex32>(op).is_ok(), defined, "{op:?}");
            assert_eq!(check::<Complex64>(op).is_ok(), defined, "{op:?}");
        }
        let err = check::<Complex64>(Op::Max).unwrap_err().to_string();
        assert!(err.contains("complex"), "{err}");
    }

    /// A rank's empty block of a reduce_scatter came from C as an empty byte slice at an
    /// address no `u64` could have: the reducers panicked casting it.
    #[test]
    fn empty_blocks_at_any_address_are_left_alone() {
        let mut words = [0u64; 2];
        let odd = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[1..1];
        op_reducer::<u64>(Op::Sum)(odd, &[]);
        reducer::<u64, _>(|x, y| *x += *y)(odd, &[]);
    }

    #[test]
    fn unaligned_operands_are_copied_not_misread() {
        let r = op_reducer::<u64>(Op::Sum);
        let mut acc = vec![0u64; 2];
        let raw: Vec<u8> = [0u8]
            .iter()
            .copied()
            .chain(3u64.to_le_bytes())
            .chain(4u64.to_le_bytes())
            .collect();
        r(bytemuck::cast_slice_mut(&mut acc), &raw[1..]);
        assert_eq!(acc, [3, 4]);
    }
}
