//! Handle conversions of the standard ABI (`MPI_*_toint` / `MPI_*_fromint`, the integers
//! other languages' bindings keep) and address arithmetic (`MPI_Aint_add`, `MPI_Aint_diff`).
//!
//! rmca's handles are small integers already (predefined ones below 0x400, the ones it
//! makes at a per-kind base plus an index, all below 2^31), so the integer of a handle is the
//! handle itself. Requests carry a generation above bit 32 (to recognise a stale handle);
//! their integer keeps the low bits and `MPI_Request_fromint` restores the generation of the
//! slot's current request.

use std::ffi::c_int;

use rmca_mpi_export::export;

use crate::abi::*;
use crate::state;

macro_rules! int_conversions {
    ($($to:ident, $from:ident;)*) => {$(
        #[doc = concat!("`", stringify!($to), "`: the handle's integer.")]
        #[export]
        pub extern "C" fn $to(handle: Handle) -> c_int {
            handle as c_int
        }

        #[doc = concat!("`", stringify!($from), "`: the handle of an integer from `", stringify!($to), "`.")]
        #[export]
        pub extern "C" fn $from(value: c_int) -> Handle {
            value as u32 as Handle
        }
    )*};
}

int_conversions! {
    MPI_Comm_toint, MPI_Comm_fromint;
    MPI_Errhandler_toint, MPI_Errhandler_fromint;
    MPI_File_toint, MPI_File_fromint;
    MPI_Group_toint, MPI_Group_fromint;
    MPI_Info_toint, MPI_Info_fromint;
    MPI_Message_toint, MPI_Message_fromint;
    MPI_Op_toint, MPI_Op_fromint;
    MPI_Session_toint, MPI_Session_fromint;
    MPI_Type_toint, MPI_Type_fromint;
    MPI_Win_toint, MPI_Win_fromint;
}

/// `MPI_Request_toint`: the request handle's low 32 bits (its slot).
#[export]
pub extern "C" fn MPI_Request_toint(request: Handle) -> c_int {
    request as u32 as c_int
}

/// `MPI_Request_fromint`: the handle of the request now in that slot (its generation
/// restored); other values come back as they are.
#[export]
pub extern "C" fn MPI_Request_fromint(value: c_int) -> Handle {
    let low = value as u32 as Handle;
    state::with(|s| Ok(s.request_from_low_bits(low))).unwrap_or(low)
}

/// `MPI_Aint_add`: `base + disp` as an address (wrapping, as C's pointer arithmetic on
/// the flat address space MPI assumes).
#[export]
pub extern "C" fn MPI_Aint_add(base: isize, disp: isize) -> isize {
    base.wrapping_add(disp)
}

/// `MPI_Aint_diff`: `addr1 - addr2`.
#[export]
pub extern "C" fn MPI_Aint_diff(addr1: isize, addr2: isize) -> isize {
    addr1.wrapping_sub(addr2)
}
