//! One module per command, each with its arguments and its `run`.

pub(crate) mod accuracy;
pub(crate) mod alibi;
pub(crate) mod bench;
pub(crate) mod devices;
pub(crate) mod encode;
pub(crate) mod plot;
pub(crate) mod rope;
pub(crate) mod rope_cache;
pub(crate) mod table;
