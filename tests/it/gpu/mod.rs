//! Everything that opens a GPU adapter: CI runs these tests on Vulkan (lavapipe) and again on
//! GL (llvmpipe).

mod alibi;
mod cli;
mod concurrency;
mod convert;
mod encode;
mod faults;
mod features;
mod in_pass;
mod pending;
mod record;
mod rope;
mod rope_pass;
mod table;
