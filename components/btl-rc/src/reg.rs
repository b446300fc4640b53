//! Registration of application memory for RDMA (the one place btl-rc needs `unsafe`).

use rmca_framework::buffer::UserBuf;
use rmca_verbs::{AccessFlags, Mr, Pd};

/// Register `buf` for local writes and remote reads and writes.
///
/// Callers keep the returned [`Mr`] only while a user of `buf` exists (the PML's request, or
/// an RDMA operation in flight), which is the [`UserBuf`] validity window.
pub(crate) fn register_user(pd: &Pd, buf: UserBuf) -> rmca_verbs::Result<Mr> {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    // SAFETY: UserBuf's contract keeps `buf` allocated while its request (or the RDMA
    // operation holding this registration) lives; the module drops the Mr when the last user
    // releases it (deregister_mem / RDMA completion), so the memory outlives the registration.
    unsafe { pd.register_raw(buf.as_ptr(), buf.len(), access) }
}
