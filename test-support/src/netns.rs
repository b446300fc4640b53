//! A fresh network namespace with a veth pair of a chosen MTU, for tests of what depends on an
//! interface (path MTU, address binding). Needs root (CAP_SYS_ADMIN) and iproute2.
#![allow(unsafe_code)]

use std::process::{Command, Stdio};

/// Run `ip args...` (in the calling thread's network namespace); panics naming the command if
/// it fails.
pub fn ip(args: &[&str]) {
    let st = Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .status()
        .expect("run ip (Debian package iproute2)");
    assert!(st.success(), "ip {args:?} failed");
}

/// Runs `body` in a thread of its own in a new network namespace holding a veth pair
/// `<name>0`/`<name>1` of `mtu` bytes, `addr` (e.g. `10.77.0.1/24`) on `<name>0`, every link up.
/// Returns false, after [`crate::skip_or_fail`], when namespaces cannot be made here; a panic
/// of `body` is the caller's.
pub fn in_fresh_netns(
    name: &str,
    mtu: u32,
    addr: &str,
    body: impl FnOnce() + Send + 'static,
) -> bool {
    if Command::new("ip").arg("-V").output().is_err() {
        crate::skip_or_fail("ip is not installed (Debian package iproute2)");
        return false;
    }
    let (a, b, mtu, addr) = (
        format!("{name}0"),
        format!("{name}1"),
        mtu.to_string(),
        addr.to_owned(),
    );
    let t = std::thread::spawn(move || {
        // SAFETY: unshare(CLONE_NEWNET) only moves the calling thread (this new one) to a new
        // network namespace; it touches no memory of ours.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Commands spawned from this thread run in its namespace.
        ip(&["link", "set", "lo", "up"]);
        ip(&[
            "link", "add", &a, "mtu", &mtu, "type", "veth", "peer", "name", &b,
        ]);
        ip(&["addr", "add", &addr, "dev", &a]);
        ip(&["link", "set", &a, "up"]);
        ip(&["link", "set", &b, "up"]);
        body();
        Ok(())
    });
    match t.join() {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            crate::skip_or_fail(format!(
                "cannot create a network namespace ({e}): needs root (CAP_SYS_ADMIN)"
            ));
            false
        }
        Err(p) => std::panic::resume_unwind(p),
    }
}
