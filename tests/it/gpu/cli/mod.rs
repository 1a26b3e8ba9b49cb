//! The `posenc` binary as a user meets it, on `--device gpu` and `auto` as well as the CPU.

mod alibi;
mod auto;
mod basics;
mod bench;
mod encode;
mod faults;
mod hostile;
mod quiet;
mod rope;
mod stream;
