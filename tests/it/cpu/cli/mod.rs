//! The `posenc` binary's commands that run on the CPU only.

mod output;
mod plot;
