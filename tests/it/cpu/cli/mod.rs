//! The `posenc` binary's commands that run on the CPU only.

mod model_config;
mod output;
mod plot;
