//! Names in this process's descriptor directories (`/dev/fd/`, `/proc/self/fd/`,
//! `/proc/thread-self/fd/`) through `Target::resolve`: a name is a descriptor output only
//! if it is the decimal number of a descriptor the process was given (open without
//! close-on-exec) for writing; every other name (digits past any descriptor number, leading
//! zeros aside, anything but digits) is refused, in a message of bounded length with no
//! control character, and nothing is created. Names hold no `/` and are not `.` or `..`,
//! so every path stays in the descriptor directory and resolving it never makes a probe
//! file elsewhere.
#![no_main]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use posenc::Error;
use posenc::output::Target;

const DIRS: [&str; 3] = ["/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"];

fuzz_target!(|data: &[u8]| {
    let Some((&which, name)) = data.split_first() else { return };
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".."
    {
        return;
    }
    let dir = DIRS[usize::from(which) % DIRS.len()];
    let path = [dir.as_bytes(), name].concat();
    let path = Path::new(OsStr::from_bytes(&path));
    match Target::resolve(path) {
        Ok(Target::Descriptor { fd, .. }) => {
            let digits = std::str::from_utf8(name).expect("a descriptor's name is digits");
            assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{digits:?}");
            assert_eq!(digits.parse::<i32>().ok(), Some(fd), "{digits:?}");
            // SAFETY: fcntl reads the descriptor's flags and touches no memory.
            let (fd_flags, status) =
                unsafe { (libc::fcntl(fd, libc::F_GETFD), libc::fcntl(fd, libc::F_GETFL)) };
            assert!(fd_flags != -1 && fd_flags & libc::FD_CLOEXEC == 0, "descriptor {fd}");
            let mode = status & libc::O_ACCMODE;
            assert!(mode == libc::O_WRONLY || mode == libc::O_RDWR, "descriptor {fd}");
        }
        Ok(other) => panic!("{other:?} for {}", path.display()),
        Err(e) => {
            assert!(matches!(e, Error::OutputPath { .. } | Error::Io { .. }), "{e:?}");
            let text = e.to_string();
            assert!(text.chars().count() < 2048, "{} characters", text.len());
            assert!(!text.chars().any(char::is_control), "{text:?}");
        }
    }
});
