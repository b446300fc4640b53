//! The functions of the standard ABI that rmca does not implement yet: each links, and
//! raises `MPI_ERR_UNSUPPORTED_OPERATION` through the error handler of its communicator (of
//! `MPI_COMM_WORLD` when it has none) with a message naming the call.
//!
//! Written by `bindings/c/abi/gen-unsupported.py`. Implementing a function means deleting its
//! line here: a function defined twice does not link. The README lists the same functions
//! (checked by a test).

use std::ffi::{c_int, c_void};

use crate::abi::*;

not_implemented_fns! {
    MPI_Close_port(port_name: *mut c_void) on MPI_COMM_WORLD;
    MPI_Comm_accept(port_name: *mut c_void, info: Handle, root: c_int, comm: Handle, newcomm: *mut c_void) on comm;
    MPI_Comm_connect(port_name: *mut c_void, info: Handle, root: c_int, comm: Handle, newcomm: *mut c_void) on comm;
    MPI_Comm_join(fd: c_int, intercomm: *mut c_void) on MPI_COMM_WORLD;
    MPI_Comm_spawn(command: *mut c_void, argv: *mut c_void, maxprocs: c_int, info: Handle, root: c_int, comm: Handle, intercomm: *mut c_void, array_of_errcodes: *mut c_void) on comm;
    MPI_Comm_spawn_multiple(count: c_int, array_of_commands: *mut c_void, array_of_argv: *mut c_void, array_of_maxprocs: *mut c_void, array_of_info: *mut c_void, root: c_int, comm: Handle, intercomm: *mut c_void, array_of_errcodes: *mut c_void) on comm;
    MPI_File_close(fh: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_delete(filename: *mut c_void, info: Handle) on MPI_COMM_WORLD;
    MPI_File_get_amode(fh: Handle, amode: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_get_atomicity(fh: Handle, flag: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_get_byte_offset(fh: Handle, offset: MPI_Offset, disp: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_get_group(fh: Handle, group: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_get_info(fh: Handle, info_used: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_get_position(fh: Handle, offset: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_get_position_shared(fh: Handle, offset: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_get_size(fh: Handle, size: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_get_type_extent(fh: Handle, datatype: Handle, extent: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_get_type_extent_c(fh: Handle, datatype: Handle, extent: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_get_view(fh: Handle, disp: *mut c_void, etype: *mut c_void, filetype: *mut c_void, datarep: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iread(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iread_all(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iread_all_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iread_at(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: c_int, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iread_at_all(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: c_int, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iread_at_all_c(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: MPI_Count, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iread_at_c(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: MPI_Count, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iread_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iread_shared(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iread_shared_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iwrite(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iwrite_all(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iwrite_all_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iwrite_at(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: c_int, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iwrite_at_all(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: c_int, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iwrite_at_all_c(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: MPI_Count, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iwrite_at_c(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: MPI_Count, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iwrite_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iwrite_shared(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_iwrite_shared_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, request: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_open(comm: Handle, filename: *mut c_void, amode: c_int, info: Handle, fh: *mut c_void) on comm;
    MPI_File_preallocate(fh: Handle, size: MPI_Offset) on MPI_COMM_WORLD;
    MPI_File_read(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_all(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_all_begin(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_read_all_begin_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_read_all_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_all_end(fh: Handle, buf: *mut c_void, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_at(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_at_all(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_at_all_begin(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: c_int, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_read_at_all_begin_c(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: MPI_Count, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_read_at_all_c(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_at_all_end(fh: Handle, buf: *mut c_void, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_at_c(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_ordered(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_ordered_begin(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_read_ordered_begin_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_read_ordered_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_ordered_end(fh: Handle, buf: *mut c_void, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_shared(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_read_shared_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_seek(fh: Handle, offset: MPI_Offset, whence: c_int) on MPI_COMM_WORLD;
    MPI_File_seek_shared(fh: Handle, offset: MPI_Offset, whence: c_int) on MPI_COMM_WORLD;
    MPI_File_set_atomicity(fh: Handle, flag: c_int) on MPI_COMM_WORLD;
    MPI_File_set_info(fh: Handle, info: Handle) on MPI_COMM_WORLD;
    MPI_File_set_size(fh: Handle, size: MPI_Offset) on MPI_COMM_WORLD;
    MPI_File_set_view(fh: Handle, disp: MPI_Offset, etype: Handle, filetype: Handle, datarep: *mut c_void, info: Handle) on MPI_COMM_WORLD;
    MPI_File_sync(fh: Handle) on MPI_COMM_WORLD;
    MPI_File_write(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_all(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_all_begin(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_write_all_begin_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_write_all_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_all_end(fh: Handle, buf: *mut c_void, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_at(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_at_all(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_at_all_begin(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: c_int, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_write_at_all_begin_c(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: MPI_Count, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_write_at_all_c(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_at_all_end(fh: Handle, buf: *mut c_void, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_at_c(fh: Handle, offset: MPI_Offset, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_ordered(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_ordered_begin(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_write_ordered_begin_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle) on MPI_COMM_WORLD;
    MPI_File_write_ordered_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_ordered_end(fh: Handle, buf: *mut c_void, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_shared(fh: Handle, buf: *mut c_void, count: c_int, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_File_write_shared_c(fh: Handle, buf: *mut c_void, count: MPI_Count, datatype: Handle, status: *mut c_void) on MPI_COMM_WORLD;
    MPI_Lookup_name(service_name: *mut c_void, info: Handle, port_name: *mut c_void) on MPI_COMM_WORLD;
    MPI_Open_port(info: Handle, port_name: *mut c_void) on MPI_COMM_WORLD;
    MPI_Publish_name(service_name: *mut c_void, info: Handle, port_name: *mut c_void) on MPI_COMM_WORLD;
    MPI_Register_datarep(datarep: *mut c_void, read_conversion_fn: *mut c_void, write_conversion_fn: *mut c_void, dtype_file_extent_fn: *mut c_void, extra_state: *mut c_void) on MPI_COMM_WORLD;
    MPI_Register_datarep_c(datarep: *mut c_void, read_conversion_fn: *mut c_void, write_conversion_fn: *mut c_void, dtype_file_extent_fn: *mut c_void, extra_state: *mut c_void) on MPI_COMM_WORLD;
    MPI_Unpublish_name(service_name: *mut c_void, info: Handle, port_name: *mut c_void) on MPI_COMM_WORLD;
}
