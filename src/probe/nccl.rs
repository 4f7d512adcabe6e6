//! NCCL, loaded at run time like cuBLAS (docs/probe.md, "The GPUs together"): the library
//! comes from the node (or the nvidia-nccl wheels a user installed), never from the build.
//! Only what the collective test calls: the version, one communicator per GPU of this process
//! (`ncclCommInitAll`), a grouped all-reduce, and the error strings.

use super::ProbeError;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::Path;

/// ncclResult_t: 0 is success.
type NcclResult = c_int;
pub(crate) type Comm = *mut c_void;

/// ncclDataType_t and ncclRedOp_t values from nccl.h.
pub(crate) const NCCL_FLOAT32: c_int = 7;
pub(crate) const NCCL_SUM: c_int = 0;

type GetVersion = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type CommInitAll = unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> NcclResult;
type AllReduce = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, *mut c_void) -> NcclResult;
type Group = unsafe extern "C" fn() -> NcclResult;
type CommDestroy = unsafe extern "C" fn(Comm) -> NcclResult;
type ErrorString = unsafe extern "C" fn(NcclResult) -> *const c_char;

/// The library and the functions the test calls, looked up once.
pub(crate) struct Nccl {
    pub get_version: GetVersion,
    pub comm_init_all: CommInitAll,
    pub all_reduce: AllReduce,
    pub group_start: Group,
    pub group_end: Group,
    pub comm_destroy: CommDestroy,
    error_string: ErrorString,
    /// Kept loaded while the function pointers above are used.
    _library: libloading::Library,
}

/// The names NCCL is found by when `probe.nccl_library` names no file.
const NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

impl Nccl {
    /// Loads `path`, or the usual names when it is empty; Err says what to install.
    pub(crate) fn load(path: &Path) -> Result<Nccl, ProbeError> {
        let candidates: Vec<&std::ffi::OsStr> = if path.as_os_str().is_empty() {
            NAMES.iter().map(std::ffi::OsStr::new).collect()
        } else {
            vec![path.as_os_str()]
        };
        let mut last = String::new();
        for name in candidates {
            // SAFETY: loading NCCL runs its initialisers, which only set up its own state.
            match unsafe { libloading::Library::new(name) } {
                Ok(library) => return Nccl::from_library(library),
                Err(e) => last = e.to_string(),
            }
        }
        Err(ProbeError::NoDriver(format!(
            "NCCL is not installed ({last}); install it (the distribution's libnccl2, or `pip install nvidia-nccl-cu12` \
             and set probe.nccl_library to its lib/libnccl.so.2) for the all-reduce across the node's GPUs"
        )))
    }

    fn from_library(library: libloading::Library) -> Result<Nccl, ProbeError> {
        // SAFETY: each symbol is NCCL's C function of the type written beside it (nccl.h).
        unsafe {
            let get = |name: &[u8]| -> Result<*const (), ProbeError> {
                library
                    .get::<*const ()>(name)
                    .map(|s| *s)
                    .map_err(|e| ProbeError::NoDriver(format!("NCCL lacks {}: {e}", String::from_utf8_lossy(name))))
            };
            Ok(Nccl {
                get_version: std::mem::transmute::<*const (), GetVersion>(get(b"ncclGetVersion")?),
                comm_init_all: std::mem::transmute::<*const (), CommInitAll>(get(b"ncclCommInitAll")?),
                all_reduce: std::mem::transmute::<*const (), AllReduce>(get(b"ncclAllReduce")?),
                group_start: std::mem::transmute::<*const (), Group>(get(b"ncclGroupStart")?),
                group_end: std::mem::transmute::<*const (), Group>(get(b"ncclGroupEnd")?),
                comm_destroy: std::mem::transmute::<*const (), CommDestroy>(get(b"ncclCommDestroy")?),
                error_string: std::mem::transmute::<*const (), ErrorString>(get(b"ncclGetErrorString")?),
                _library: library,
            })
        }
    }

    /// NCCL's version as it says it (22703: 2.27.3).
    pub(crate) fn version(&self) -> Result<i32, ProbeError> {
        let mut version = 0;
        // SAFETY: a valid out pointer.
        self.check("ncclGetVersion", unsafe { (self.get_version)(&mut version) })?;
        Ok(version)
    }

    /// Ok for success, else the call's name and NCCL's words for the error.
    pub(crate) fn check(&self, call: &str, result: NcclResult) -> Result<(), ProbeError> {
        if result == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static string for any result (or null).
        let text = unsafe { (self.error_string)(result) };
        let words = if text.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: NUL-terminated, static in NCCL.
            unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
        };
        Err(ProbeError::Cuda(format!("{call}: {words} (ncclResult {result})")))
    }
}

/// "2.27.3" from NCCL's 22703 (versions before 2.9 wrote 2708 for 2.7.8).
pub(crate) fn version_text(code: i32) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code / 100) % 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code / 100) % 10, code % 100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_nccl_writes_them() {
        assert_eq!(version_text(22703), "2.27.3");
        assert_eq!(version_text(21903), "2.19.3");
        assert_eq!(version_text(2708), "2.7.8");
    }

    #[test]
    fn a_missing_library_says_what_to_install() {
        let e = Nccl::load(Path::new("/nonexistent/libnccl.so.2"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("NCCL is not installed") && e.contains("probe.nccl_library"),
            "{e}"
        );
    }
}
