//! The `posenc` binary's commands that run on the CPU only.

mod limits;
mod model_config;
mod output;
mod plot;
