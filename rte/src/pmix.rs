//! PMIx client: OpenPMIx's `libpmix` loaded at run time (`dlopen`), so that building rmca needs
//! no PMIx; only a rank started by a PMIx server (`srun --mpi=pmix`) loads it. The only other
//! module of this crate with `unsafe`.
//!
//! The few structures crossed with the library are declared here as in `pmix_common.h` of
//! OpenPMIx 4.2 (`pmix_proc_t`, `pmix_value_t`, `pmix_info_t`); a test compiles the installed
//! headers and compares sizes and offsets. Their layout has been stable since PMIx 3, which
//! [`PmixClient::init`] checks against `PMIx_Get_version` before using anything else.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::Mutex;
use std::time::Duration;

use crate::RteError;

/// The library loaded when [`ENV_PMIX_LIBRARY`] does not name another.
pub const DEFAULT_LIBRARY: &str = "libpmix.so.2";
/// Path or name of the PMIx library to load instead of [`DEFAULT_LIBRARY`].
pub const ENV_PMIX_LIBRARY: &str = "RMCA_PMIX_LIBRARY";

/// `PMIX_MAX_NSLEN + 1`.
pub(crate) const NSPACE_LEN: usize = 256;
/// `PMIX_MAX_KEYLEN + 1`.
pub(crate) const KEY_LEN: usize = 512;

const PMIX_SUCCESS: c_int = 0;
const PMIX_ERR_NOT_FOUND: c_int = -46;
/// `PMIX_RANK_WILDCARD`: job-level data.
const RANK_WILDCARD: u32 = u32::MAX - 1;
/// `PMIX_GLOBAL`: share with processes on every node.
const SCOPE_GLOBAL: u8 = 3;

// pmix_data_type_t values used here.
const T_BOOL: u16 = 1;
const T_STRING: u16 = 3;
const T_SIZE: u16 = 4;
const T_INT: u16 = 6;
const T_INT32: u16 = 9;
const T_UINT8: u16 = 12;
const T_UINT16: u16 = 13;
const T_UINT32: u16 = 14;
const T_UINT64: u16 = 15;
const T_BYTE_OBJECT: u16 = 27;
const T_PROC_RANK: u16 = 40;

/// Job size (`uint32_t`), asked of the wildcard rank.
pub(crate) const KEY_JOB_SIZE: &str = "pmix.job.size";
/// A rank's index among the job's ranks on its node (`uint16_t`).
pub(crate) const KEY_LOCAL_RANK: &str = "pmix.lrank";
/// How many of the job's ranks share this node (`uint32_t`).
pub(crate) const KEY_LOCAL_SIZE: &str = "pmix.local.size";
/// The node a rank runs on (`uint32_t`).
pub(crate) const KEY_NODEID: &str = "pmix.nodeid";
/// The host name of the node a rank runs on (string).
pub(crate) const KEY_HOSTNAME: &str = "pmix.hname";
const KEY_COLLECT_DATA: &str = "pmix.collect";
const KEY_TIMEOUT: &str = "pmix.timeout";
const KEY_IMMEDIATE: &str = "pmix.immediate";

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PmixProc {
    pub(crate) nspace: [c_char; NSPACE_LEN],
    pub(crate) rank: u32,
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PmixByteObject {
    bytes: *mut c_char,
    size: usize,
}

/// `pmix_envar_t`: never read, but the largest member of the value union, so it gives the
/// union the size it has in C.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PmixEnvar {
    envar: *mut c_char,
    value: *mut c_char,
    separator: c_char,
}

/// The union of `pmix_value_t`, with the members this client reads or writes.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union PmixValueData {
    flag: bool,
    integer: c_int,
    int32: i32,
    size: usize,
    uint8: u8,
    uint16: u16,
    uint32: u32,
    uint64: u64,
    string: *mut c_char,
    bo: PmixByteObject,
    envar: PmixEnvar,
}

/// `pmix_value_t`.
#[repr(C)]
pub(crate) struct PmixValue {
    type_: u16,
    data: PmixValueData,
}

/// `pmix_info_t`.
#[repr(C)]
pub(crate) struct PmixInfo {
    key: [c_char; KEY_LEN],
    flags: u32,
    value: PmixValue,
}

impl PmixInfo {
    fn new(key: &str, type_: u16, data: PmixValueData) -> Self {
        Self {
            key: fixed(key),
            flags: 0,
            value: PmixValue { type_, data },
        }
    }
    fn flag(key: &str) -> Self {
        Self::new(key, T_BOOL, PmixValueData { flag: true })
    }
    fn timeout(secs: c_int) -> Self {
        Self::new(KEY_TIMEOUT, T_INT, PmixValueData { integer: secs })
    }
}

/// `s` as a NUL-terminated fixed-size C array (the caller checked the length).
fn fixed<const N: usize>(s: &str) -> [c_char; N] {
    let mut a = [0 as c_char; N];
    for (d, b) in a.iter_mut().zip(s.bytes().take(N - 1)) {
        *d = b as c_char;
    }
    a
}

type InitFn = unsafe extern "C" fn(*mut PmixProc, *mut PmixInfo, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const PmixInfo, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut PmixValue) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const PmixProc, usize, *const PmixInfo, usize) -> c_int;
type GetFn = unsafe extern "C" fn(
    *const PmixProc,
    *const c_char,
    *const PmixInfo,
    usize,
    *mut *mut PmixValue,
) -> c_int;
type AbortFn = unsafe extern "C" fn(c_int, *const c_char, *mut PmixProc, usize) -> c_int;
type ValueDestructFn = unsafe extern "C" fn(*mut PmixValue);
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type VersionFn = unsafe extern "C" fn() -> *const c_char;

/// The library's entry points. The library itself stays loaded for the life of the process
/// (it runs a progress thread; unloading it is never safe).
struct Api {
    init: InitFn,
    finalize: FinalizeFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    abort: AbortFn,
    value_destruct: ValueDestructFn,
    error_string: ErrorStringFn,
}

/// The library once loaded (a failure is not kept: a later call may name another path).
static API: Mutex<Option<&'static Api>> = Mutex::new(None);

/// The API, loading `path` if no PMIx library is loaded yet.
fn api(path: &str) -> Result<&'static Api, String> {
    let mut loaded = API.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(api) = *loaded {
        return Ok(api);
    }
    let api: &'static Api = Box::leak(Box::new(load(path)?));
    *loaded = Some(api);
    Ok(api)
}

fn load(path: &str) -> Result<Api, String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading runs the library's initialisers; libpmix's only set up its own state.
    // RTLD_GLOBAL: libpmix's own plugins (pmix_mca_*.so) resolve its symbols from the global
    // scope.
    let lib =
        unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| e.to_string())?;
    // SAFETY: each symbol is declared with the signature of its prototype in OpenPMIx's
    // pmix.h (the layouts of the structures it takes are checked by this module's tests).
    let api = unsafe {
        let version: VersionFn = *lib
            .get::<VersionFn>(b"PMIx_Get_version\0")
            .map_err(|e| e.to_string())?;
        let v = CStr::from_ptr(version()).to_string_lossy().into_owned();
        check_version(&v)?;
        macro_rules! sym {
            ($ty:ty, $name:literal) => {
                *lib.get::<$ty>(concat!($name, "\0").as_bytes())
                    .map_err(|e| format!("{path}: {e}"))?
            };
        }
        Api {
            init: sym!(InitFn, "PMIx_Init"),
            finalize: sym!(FinalizeFn, "PMIx_Finalize"),
            put: sym!(PutFn, "PMIx_Put"),
            commit: sym!(CommitFn, "PMIx_Commit"),
            fence: sym!(FenceFn, "PMIx_Fence"),
            get: sym!(GetFn, "PMIx_Get"),
            abort: sym!(AbortFn, "PMIx_Abort"),
            value_destruct: sym!(ValueDestructFn, "PMIx_Value_destruct"),
            error_string: sym!(ErrorStringFn, "PMIx_Error_string"),
        }
    };
    // Never unloaded: the function pointers above stay valid for the life of the process.
    std::mem::forget(lib);
    Ok(api)
}

/// Accept OpenPMIx 3 to 5 (`OpenPMIx 4.2.2rc2 (PMIx Standard: 4.2, ...)`): the releases whose
/// structure layouts this module declares.
fn check_version(v: &str) -> Result<(), String> {
    let major = v
        .strip_prefix("OpenPMIx ")
        .and_then(|rest| rest.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(3..=5) => Ok(()),
        _ => Err(format!(
            "unsupported PMIx library {v:?} (supported: OpenPMIx 3, 4 and 5)"
        )),
    }
}

/// An initialised PMIx client.
pub(crate) struct PmixClient {
    api: &'static Api,
    me: PmixProc,
    /// `PMIX_TIMEOUT` in seconds for fences and lookups (`None`: wait forever).
    timeout_secs: Option<c_int>,
}

impl std::fmt::Debug for PmixClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmixClient")
            .field("nspace", &self.nspace())
            .field("rank", &self.me.rank)
            .finish_non_exhaustive()
    }
}

impl PmixClient {
    /// Load `library` (once per process) and connect to the local PMIx server named by the
    /// environment (`PMIX_NAMESPACE`, `PMIX_RANK`, `PMIX_SERVER_URI*`).
    pub(crate) fn init(library: &str, timeout: Option<Duration>) -> Result<Self, RteError> {
        let api = api(library).map_err(|why| RteError::PmixUnavailable {
            library: library.to_string(),
            why,
        })?;
        let mut me = PmixProc {
            nspace: [0; NSPACE_LEN],
            rank: 0,
        };
        // SAFETY: `me` is a valid, writable pmix_proc_t; no info array is passed.
        let rc = unsafe { (api.init)(&mut me, std::ptr::null_mut(), 0) };
        let c = Self {
            api,
            me,
            timeout_secs: timeout.map(|t| t.as_secs().clamp(1, c_int::MAX as u64) as c_int),
        };
        c.check("PMIx_Init", rc)?;
        Ok(c)
    }

    /// This process's rank in its namespace.
    pub(crate) fn rank(&self) -> u32 {
        self.me.rank
    }

    /// The job's namespace (Slurm: `slurm.pmix.<job>.<step>`).
    pub(crate) fn nspace(&self) -> String {
        // SAFETY: PMIx_Init filled `nspace` with a NUL-terminated string shorter than the
        // array (PMIX_MAX_NSLEN), and the array was zeroed before.
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    fn check(&self, op: &str, rc: c_int) -> Result<(), RteError> {
        if rc == PMIX_SUCCESS {
            return Ok(());
        }
        // SAFETY: PMIx_Error_string returns a static NUL-terminated string for any status.
        let text = unsafe { CStr::from_ptr((self.api.error_string)(rc)) }
            .to_string_lossy()
            .into_owned();
        Err(RteError::Pmix {
            op: op.to_string(),
            status: rc,
            text,
        })
    }

    fn proc_of(&self, rank: Option<u32>) -> PmixProc {
        PmixProc {
            nspace: self.me.nspace,
            rank: rank.unwrap_or(RANK_WILDCARD),
        }
    }

    fn c_key(key: &str) -> Result<CString, RteError> {
        if key.len() >= KEY_LEN {
            return Err(RteError::BadKey {
                key: key.to_string(),
                why: format!("longer than PMIx's {} characters", KEY_LEN - 1),
            });
        }
        CString::new(key).map_err(|_| RteError::BadKey {
            key: key.to_string(),
            why: "contains a NUL character".into(),
        })
    }

    /// Publish `value` under `key` for every rank (visible after [`PmixClient::fence`]).
    pub(crate) fn put(&mut self, key: &str, value: &[u8]) -> Result<(), RteError> {
        let k = Self::c_key(key)?;
        let mut v = PmixValue {
            type_: T_BYTE_OBJECT,
            data: PmixValueData {
                bo: PmixByteObject {
                    // PMIx_Put copies the bytes and never writes through this pointer.
                    bytes: value.as_ptr() as *mut c_char,
                    size: value.len(),
                },
            },
        };
        // SAFETY: `k` is NUL-terminated; `v` is a valid byte-object value whose `size` bytes
        // at `bytes` stay alive for the call, which copies them.
        let rc = unsafe { (self.api.put)(SCOPE_GLOBAL, k.as_ptr(), &mut v) };
        self.check("PMIx_Put", rc)
    }

    /// Commit what was put and wait for every rank of the job, collecting all ranks' data.
    pub(crate) fn fence(&mut self) -> Result<(), RteError> {
        // SAFETY: PMIx_Commit takes no arguments.
        let rc = unsafe { (self.api.commit)() };
        self.check("PMIx_Commit", rc)?;
        let mut info = vec![PmixInfo::flag(KEY_COLLECT_DATA)];
        if let Some(t) = self.timeout_secs {
            info.push(PmixInfo::timeout(t));
        }
        let all = self.proc_of(None);
        // SAFETY: `all` (one proc: the whole namespace) and `info` are valid arrays of the
        // lengths passed, alive for the blocking call.
        let rc = unsafe { (self.api.fence)(&all, 1, info.as_ptr(), info.len()) };
        self.check("PMIx_Fence", rc)
    }

    /// Look up `key` of `rank` (`None`: job-level data); `Ok(None)` when nobody published it.
    /// Never asks the host to wait for data that is not there yet: after a collecting fence
    /// everything published is already at the local server.
    fn get(
        &mut self,
        rank: Option<u32>,
        key: &str,
        read: impl FnOnce(&PmixValue) -> Result<Vec<u8>, String>,
    ) -> Result<Option<Vec<u8>>, RteError> {
        let k = Self::c_key(key)?;
        let mut info = vec![PmixInfo::flag(KEY_IMMEDIATE)];
        if let Some(t) = self.timeout_secs {
            info.push(PmixInfo::timeout(t));
        }
        let who = self.proc_of(rank);
        let mut out: *mut PmixValue = std::ptr::null_mut();
        // SAFETY: `who`, `k` and `info` are valid for the call; `out` is a valid out-pointer.
        let rc = unsafe { (self.api.get)(&who, k.as_ptr(), info.as_ptr(), info.len(), &mut out) };
        if rc == PMIX_ERR_NOT_FOUND {
            return Ok(None);
        }
        self.check(&format!("PMIx_Get({key})"), rc)?;
        if out.is_null() {
            return Ok(None);
        }
        // SAFETY: on success PMIx_Get stores a value it allocated with malloc; it is ours to
        // read, then to destruct and free (PMIX_VALUE_RELEASE does the same).
        let result = unsafe {
            let r = read(&*out);
            (self.api.value_destruct)(out);
            libc::free(out.cast());
            r
        };
        result.map(Some).map_err(|why| {
            RteError::Protocol(format!("PMIx value {key:?} of rank {rank:?}: {why}"))
        })
    }

    /// `rank`'s published bytes under `key`.
    pub(crate) fn get_bytes(&mut self, rank: u32, key: &str) -> Result<Option<Vec<u8>>, RteError> {
        self.get(Some(rank), key, |v| match v.type_ {
            // SAFETY: the type says the union holds a byte object of `size` bytes at `bytes`
            // (or a null pointer for an empty one).
            T_BYTE_OBJECT => unsafe {
                let bo = v.data.bo;
                if bo.bytes.is_null() || bo.size == 0 {
                    Ok(Vec::new())
                } else {
                    Ok(std::slice::from_raw_parts(bo.bytes as *const u8, bo.size).to_vec())
                }
            },
            t => Err(format!("expected a byte object, got data type {t}")),
        })
    }

    /// An unsigned integer of `rank` (`None`: of the job), whatever width the host used.
    pub(crate) fn get_u32(
        &mut self,
        rank: Option<u32>,
        key: &str,
    ) -> Result<Option<u32>, RteError> {
        let v = self.get(rank, key, |v| {
            // SAFETY: each arm reads the union member its type tag names.
            let n: Option<u64> = unsafe {
                match v.type_ {
                    T_UINT32 | T_PROC_RANK => Some(u64::from(v.data.uint32)),
                    T_UINT16 => Some(u64::from(v.data.uint16)),
                    T_UINT8 => Some(u64::from(v.data.uint8)),
                    T_UINT64 => Some(v.data.uint64),
                    T_SIZE => Some(v.data.size as u64),
                    T_INT => u64::try_from(v.data.integer).ok(),
                    T_INT32 => u64::try_from(v.data.int32).ok(),
                    t => return Err(format!("expected an unsigned integer, got data type {t}")),
                }
            };
            let n = n
                .and_then(|n| u32::try_from(n).ok())
                .ok_or("a negative or oversized integer")?;
            Ok(n.to_le_bytes().to_vec())
        })?;
        Ok(v.map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    }

    /// A string of `rank`.
    pub(crate) fn get_string(&mut self, rank: u32, key: &str) -> Result<Option<String>, RteError> {
        let v = self.get(Some(rank), key, |v| match v.type_ {
            // SAFETY: the type says the union holds a NUL-terminated string (or null).
            T_STRING => unsafe {
                let s = v.data.string;
                Ok(if s.is_null() {
                    Vec::new()
                } else {
                    CStr::from_ptr(s).to_bytes().to_vec()
                })
            },
            t => Err(format!("expected a string, got data type {t}")),
        })?;
        Ok(v.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Ask the host to kill every process of the job.
    pub(crate) fn abort(&mut self, code: i32, msg: &str) -> Result<(), RteError> {
        let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: `m` is NUL-terminated; no proc array means the whole namespace.
        let rc = unsafe { (self.api.abort)(code, m.as_ptr(), std::ptr::null_mut(), 0) };
        self.check("PMIx_Abort", rc)
    }

    /// Leave the job cleanly.
    pub(crate) fn finalize(&mut self) -> Result<(), RteError> {
        // SAFETY: no info array is passed.
        let rc = unsafe { (self.api.finalize)(std::ptr::null(), 0) };
        self.check("PMIx_Finalize", rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};
    use std::process::Command;

    #[test]
    fn versions_outside_3_to_5_are_refused_by_name() {
        assert!(check_version("OpenPMIx 4.2.2rc2 (PMIx Standard: 4.2, Stable ABI: 0.0)").is_ok());
        assert!(check_version("OpenPMIx 5.0.1").is_ok());
        let e = check_version("OpenPMIx 2.1.0").unwrap_err();
        assert!(
            e.contains("\"OpenPMIx 2.1.0\"") && e.contains("OpenPMIx 3, 4 and 5"),
            "{e}"
        );
        assert!(check_version("something else").is_err());
    }

    #[test]
    fn fixed_keys_are_truncated_and_terminated() {
        let k: [c_char; 4] = fixed("abcdef");
        assert_eq!(k, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
    }

    /// The structures declared here against the installed `pmix_common.h`: compile a C
    /// program that prints their sizes and offsets. Needs gcc and Debian's libpmix-dev
    /// (scripts/install-deps.sh).
    #[test]
    fn layouts_match_the_installed_headers() {
        let cflags = Command::new("pkg-config")
            .args(["--cflags", "pmix"])
            .output();
        let cflags = match cflags {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            _ => {
                rmca_test_support::skip_or_fail(
                    "PMIx headers not found by pkg-config (Debian package libpmix-dev)",
                );
                return;
            }
        };
        let dir = std::env::temp_dir().join(format!("rmca-pmix-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("layout.c");
        std::fs::write(
            &src,
            r#"#include <stdio.h>
#include <stddef.h>
#include <pmix_common.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %zu %zu %zu %zu %zu\n",
        sizeof(pmix_proc_t), offsetof(pmix_proc_t, rank),
        sizeof(pmix_value_t), offsetof(pmix_value_t, data),
        sizeof(pmix_info_t), offsetof(pmix_info_t, flags), offsetof(pmix_info_t, value),
        sizeof(pmix_byte_object_t), offsetof(pmix_byte_object_t, size),
        sizeof(pmix_envar_t));
    return 0;
}
"#,
        )
        .unwrap();
        let exe = dir.join("layout");
        let cc = Command::new("gcc")
            .args(cflags.split_whitespace())
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output();
        let cc = match cc {
            Ok(o) => o,
            Err(e) => {
                rmca_test_support::skip_or_fail(format!(
                    "cannot run gcc ({e}): Debian package gcc"
                ));
                return;
            }
        };
        assert!(
            cc.status.success(),
            "compiling against pmix_common.h failed: {}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let out = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let c: Vec<usize> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        let rust = vec![
            size_of::<PmixProc>(),
            offset_of!(PmixProc, rank),
            size_of::<PmixValue>(),
            offset_of!(PmixValue, data),
            size_of::<PmixInfo>(),
            offset_of!(PmixInfo, flags),
            offset_of!(PmixInfo, value),
            size_of::<PmixByteObject>(),
            offset_of!(PmixByteObject, size),
            size_of::<PmixEnvar>(),
        ];
        assert_eq!(
            rust, c,
            "proc size/rank, value size/data, info size/flags/value, byte object size/size, envar size"
        );
    }
}
