//! The one device policy of every command that computes (table, encode, rope, alibi,
//! accuracy): `--device cpu|gpu|auto`, and what `auto` does when the GPU fails.

use clap::ValueEnum;
use ndarray::Array2;
use posenc::placement::{AutoPolicy, HostJob};
use posenc::{Error, PeSpec, gpu};

use crate::failure::{Failure, note};
use crate::output::{cpu_table, reserve_table};

/// `--device`: where the fast paths run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum FastDevice {
    /// The fast multi-threaded CPU path.
    Cpu,
    /// The GPU, through wgpu.
    Gpu,
    /// The faster of the two for a host result (a cost model; `POSENC_AUTO=gpu`: the GPU
    /// if one opens), the CPU when the GPU fails.
    Auto,
}

/// Where the fast paths run, once chosen.
pub(crate) enum Compute {
    Cpu,
    Gpu(Box<gpu::Context>),
}

impl Compute {
    /// The GPU wgpu's conventions choose; `budget` overrides POSENC_GPU_MEMORY_BUDGET.
    /// POSENC_FAULT_INJECT, read here as every posenc variable is, may lose it at once.
    fn open_gpu(budget: Option<u64>) -> Result<Self, Error> {
        let ctx = gpu::Options::from_env().and_then(|o| gpu::Context::new(&o))?;
        let ctx = match budget {
            Some(bytes) => ctx.with_memory_budget(bytes),
            None => ctx,
        };
        Ok(Self::Gpu(Box::new(ctx)))
    }

    /// The sinusoid table of `spec` at `positions`.
    pub(crate) fn table(&self, spec: &PeSpec, positions: &[u32]) -> Result<Array2<f32>, Failure> {
        Ok(match self {
            Self::Cpu => cpu_table(spec, positions)?,
            Self::Gpu(ctx) => {
                reserve_table(spec, positions)?;
                ctx.table(spec, positions)?
            }
        })
    }

    /// `cpu`, or `gpu: ` and the adapter's name and backend.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Cpu => "cpu".into(),
            Self::Gpu(ctx) => {
                let s = ctx.summary();
                format!("gpu: {}, {}", s.name, s.backend)
            }
        }
    }
}

/// Runs `work`, whose result is `job`, where `device` says and returns what it computed.
///
/// - `cpu`: on the CPU; no GPU is opened.
/// - `gpu`: on the GPU; any failure stands (exit 1, one line), save a malformed posenc
///   variable met while opening it (exit 2).
/// - `auto`: every command's result goes to the host, so by default
///   ([`AutoPolicy::Cost`]) on the CPU unless the cost model expects the GPU to deliver
///   `job` sooner ([`HostJob::prefers_gpu`]) and the adapter that opens is a hardware one;
///   with `POSENC_AUTO=gpu`, on the GPU whenever one opens. On the GPU, unless none opens
///   or the work meets a device fault there (see [`is_device_fault`]): then one `posenc:
///   note:` line says why and `work` runs again on the CPU, which gives the same bits. The
///   context is dropped before the CPU starts.
///
/// `work` must leave no trace when it fails, so that running it twice is safe: it computes
/// into memory and the caller writes the output once it has it, or it writes a file that
/// appears only on success. A failure marked [`Failure::after_delivery`] (part of a
/// streamed result already reached its reader) is reported, never run again.
pub(crate) fn on_device<T>(
    device: FastDevice,
    budget: Option<u64>,
    job: HostJob,
    work: impl Fn(&Compute) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let policy = match device {
        // posenc's GPU variables are checked whichever device the model picks, so a
        // malformed one is refused the same way at every job size.
        FastDevice::Auto => gpu::Options::from_env().and(AutoPolicy::from_env())?,
        _ => AutoPolicy::Gpu,
    };
    let cost = policy == AutoPolicy::Cost;
    if cost && !job.prefers_gpu(posenc::placement::cpu_threads(), false) {
        return work(&Compute::Cpu);
    }
    let why = match device {
        FastDevice::Cpu => return work(&Compute::Cpu),
        FastDevice::Gpu => return work(&Compute::open_gpu(budget)?),
        FastDevice::Auto => match Compute::open_gpu(budget) {
            // A software adapter runs the kernels on these same cores, slower than the
            // CPU path (docs/performance.md).
            Ok(Compute::Gpu(ctx)) if cost && ctx.is_software() => {
                drop(ctx);
                return work(&Compute::Cpu);
            }
            Ok(gpu) => match work(&gpu) {
                Err(Failure { error, delivered: false, .. }) if is_device_fault(&error) => {
                    format!("the GPU failed, computing on the CPU instead: {error}")
                }
                done => return done,
            },
            // No adapter, or none could open, or drivers not to be started under the
            // process's address-space limit (`gpu::check_driver_address_space`).
            Err(
                e @ (Error::NoAdapter { .. } | Error::RequestDevice { .. } | Error::Limit { .. }),
            ) => {
                format!("computing on the CPU: {e}")
            }
            Err(e) => return Err(e.into()),
        },
    };
    note(&why);
    work(&Compute::Cpu)
}

/// Whether `--device auto` answers `error`, met on the GPU, by computing on the CPU: the
/// device was lost or ran out of memory, or the request exceeds a limit of the GPU path (a
/// row larger than one storage binding, a table larger than the memory budget). The CPU
/// has none of these limits. Other GPU errors (`Error::Gpu`: wgpu refused what posenc
/// asked) are posenc's bugs, reported rather than hidden behind a CPU result.
fn is_device_fault(error: &Error) -> bool {
    matches!(error, Error::DeviceLost { .. } | Error::OutOfMemory { .. } | Error::Limit { .. })
}
