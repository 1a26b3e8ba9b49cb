//! `posenc devices`: every GPU adapter wgpu can see, as text or JSON.

use clap::Args;
use posenc::gpu;

use crate::failure::{Failure, note};
use crate::output::to_stdout;

#[derive(Debug, Args)]
pub(crate) struct DevicesArgs {
    /// Print a JSON array instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(&DevicesArgs { json }: &DevicesArgs) -> Result<(), Failure> {
    crate::output::check_report_stdout()?;
    gpu::check_wgpu_env().map_err(Failure::usage)?;
    gpu::check_driver_address_space()?;
    let adapters = gpu::adapters();
    // None is not a failure (exit 0), and stdout keeps to the list: an empty one (`[]` with
    // --json, nothing as text), the note on stderr.
    if adapters.is_empty() {
        let backend = std::env::var("WGPU_BACKEND").ok();
        note(&format!("no GPU adapters found; {}", gpu::no_adapter_hint(backend.as_deref())));
    }
    if json {
        return to_stdout(|w| {
            serde_json::to_writer_pretty(&mut *w, &adapters)?;
            w.write_all(b"\n")
        });
    }
    to_stdout(|w| {
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        for (k, a) in adapters.iter().enumerate() {
            if k > 0 {
                writeln!(w)?;
            }
            writeln!(w, "[{k}] {}", a.name)?;
            writeln!(w, "    backend:             {}", a.backend)?;
            writeln!(w, "    device type:         {}", a.device_type)?;
            writeln!(w, "    driver:              {}", a.driver)?;
            writeln!(w, "    max storage binding: {}", bytes(a.max_storage_binding))?;
            writeln!(w, "    max buffer size:     {}", bytes(a.max_buffer_size))?;
            writeln!(w, "    SHADER_F16:          {}", yes_no(a.shader_f16))?;
            writeln!(w, "    TIMESTAMP_QUERY:     {}", yes_no(a.timestamp_query))?;
        }
        Ok(())
    })
}

/// A byte count, exact and in binary units.
fn bytes(n: u64) -> String {
    let units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = n as f64;
    let mut unit = "B";
    for u in units {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    if unit == "B" { format!("{n} B") } else { format!("{n} B ({value:.1} {unit})") }
}
