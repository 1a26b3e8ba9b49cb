//! `alibi_slopes` and `alibi_bias`: `posenc alibi --slopes` and `posenc alibi`.

use numpy::{PyArray1, PyArray3};
use posenc::alibi::{self, AlibiSpec, Form};
use posenc::alloc::check_allocation;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::{Device, Failure, compute, on_device};
use posenc::placement::HostJob;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(alibi_slopes, m)?)?;
    m.add_function(wrap_pyfunction!(alibi_bias, m)?)?;
    Ok(())
}

/// The float32 slopes of `heads` heads.
#[pyfunction]
fn alibi_slopes(py: Python<'_>, heads: u32) -> PyResult<Bound<'_, PyArray1<f32>>> {
    let slopes = compute(py, || alibi::slopes(heads).map_err(Failure::from))?;
    Ok(PyArray1::from_vec(py, slopes))
}

/// The bias tensor `[heads, len, kv_len]`, float32.
#[pyfunction]
#[pyo3(signature = (*, heads, len, kv_len, form, offset, device))]
fn alibi_bias<'py>(
    py: Python<'py>,
    heads: u32,
    len: u64,
    kv_len: Option<u64>,
    form: &str,
    offset: u32,
    device: &str,
) -> PyResult<(Bound<'py, PyArray3<f32>>, Option<String>)> {
    let device = Device::parse(device)?;
    let form = match form {
        "symmetric" => Form::Symmetric,
        "causal" => Form::Causal,
        other => {
            return Err(PyValueError::new_err(format!(
                "invalid form: {other:?} (allowed: \"symmetric\", \"causal\")"
            )));
        }
    };
    let (bias, note) = compute(py, || {
        let spec = AlibiSpec::new(heads, len)
            .and_then(|s| s.with_offset(offset))
            .and_then(|s| match kv_len {
                Some(kv_len) => s.with_kv_len(kv_len),
                None => Ok(s),
            })
            .map(|s| s.with_form(form))
            .and_then(|s| s.check_size().map(|()| s))?;
        let job = HostJob::Alibi { values: u64::try_from(spec.n_values()).unwrap_or(u64::MAX) };
        on_device(device, None, job, |ctx| match ctx {
            None => alibi::bias_cpu(&spec),
            Some(ctx) => {
                check_allocation("the ALiBi bias", spec.n_values() as u64 * 4)?;
                ctx.alibi_bias(&spec)
            }
        })
    })?;
    Ok((PyArray3::from_owned_array(py, bias), note))
}
