//! A successful run writes nothing to stderr but posenc's own notes, even where the GPU
//! driver stack would complain: without `XDG_RUNTIME_DIR`, Mesa's Vulkan device-select
//! layer made every command that enumerates adapters print `error: XDG_RUNTIME_DIR is
//! invalid or not set in the environment.` twice. Each run here has the variable removed
//! from its environment.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::cli::{assert_ok, files_in, gpu_available, stderr};

/// Runs posenc with `XDG_RUNTIME_DIR` unset and `TMPDIR` at `tmp`.
fn without_runtime_dir(args: &[&str], tmp: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_posenc"))
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", tmp)
        .output()
        .expect("the posenc binary runs")
}

#[test]
fn successful_gpu_runs_write_nothing_to_stderr_without_a_runtime_dir() {
    if !gpu_available("quiet stderr") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for args in [
        &["devices"][..],
        &["devices", "--json"],
        &["table", "--device", "gpu", "--dim", "8", "--len", "3"],
        &["table", "--device", "auto", "--dim", "8", "--len", "3"],
        &["alibi", "--heads", "2", "--slopes"],
    ] {
        let out = without_runtime_dir(args, tmp.path());
        assert_ok(&out, &args.join(" "));
        assert_eq!(stderr(&out), "", "posenc {}", args.join(" "));
        // Nothing is left in the temporary directory.
        assert_eq!(files_in(tmp.path()), Vec::<String>::new(), "posenc {}", args.join(" "));
    }
}

/// Where no directory can be made (TMPDIR missing, or a file), the drivers used to print
/// `error: XDG_RUNTIME_DIR is invalid or not set in the environment.` twice, even on
/// success: posenc's own runtime directory could not be created. It needs none.
#[test]
fn successful_gpu_runs_are_quiet_where_no_directory_can_be_made() {
    if !gpu_available("quiet stderr without a temporary directory") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    for tmpdir in [tmp.path().join("missing"), file] {
        for args in [&["devices"][..], &["table", "--device", "gpu", "--dim", "8", "--len", "3"]] {
            let out = without_runtime_dir(args, &tmpdir);
            let case = format!("posenc {} with TMPDIR={}", args.join(" "), tmpdir.display());
            assert_ok(&out, &case);
            assert_eq!(stderr(&out), "", "{case}");
        }
    }
    assert_eq!(files_in(tmp.path()), ["a-file"]);
}

#[test]
fn quieting_the_drivers_hides_no_adapter() {
    if !gpu_available("adapters without a runtime dir") {
        return;
    }
    let key = |a: &serde_json::Value| format!("{} ({})", a["name"], a["backend"]);
    let mut here: Vec<String> =
        posenc::gpu::adapters().iter().map(|a| format!("{:?} ({:?})", a.name, a.backend)).collect();
    let tmp = tempfile::tempdir().unwrap();
    let out = without_runtime_dir(&["devices", "--json"], tmp.path());
    assert_ok(&out, "devices --json");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut listed: Vec<String> = listed.as_array().unwrap().iter().map(key).collect();
    here.sort();
    listed.sort();
    // Under WGPU_BACKEND=vulkan or gl both sides see that backend's adapters; unset, both
    // see every backend's, the GL adapter (llvmpipe through EGL) included.
    assert_eq!(listed, here);
}
