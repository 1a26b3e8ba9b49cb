//! The library on the CPU, and the binary's commands that never open a GPU adapter.

mod alibi;
mod bad_input;
mod cli;
mod commands;
mod encode;
mod encode_shapes;
mod learned;
mod model_config;
mod mrope;
mod plot;
mod rope;
mod rope_config;
mod rope_families;
mod rope_family_table;
mod table;
mod variants;
