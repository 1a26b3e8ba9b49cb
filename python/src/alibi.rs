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
#[pyo3(signature = (*, heads, len, kv_len, form, offset, device, out = None))]
#[allow(clippy::too_many_arguments)]
fn alibi_bias<'py>(
    py: Python<'py>,
    heads: u32,
    len: u64,
    kv_len: Option<u64>,
    form: &str,
    offset: u32,
    device: &str,
    out: Option<&Bound<'py, PyAny>>,
) -> crate::MaybeNew<'py, PyArray3<f32>> {
    let device = Device::parse(device)?;
    let mut out_array = out.map(crate::arrays::f32_out::<ndarray::Ix3>).transpose()?;
    let out_view = out_array.as_mut().map(|o| o.as_array_mut());
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
        let (h, l, k) = spec.shape();
        if let Some(o) = &out_view {
            crate::arrays::check_out_shape("alibi", &[h, l, k], o.shape())?;
        }
        let bytes = spec.n_values() as u64 * 4;
        let job = HostJob::Alibi { values: u64::try_from(spec.n_values()).unwrap_or(u64::MAX) };
        // Into a caller's `out`: the CPU writes it where it is (a strided one through a
        // bias of its own); the GPU makes its result first.
        let out_view = std::sync::Mutex::new(out_view);
        on_device(device, None, job, |ctx| {
            let mut out = out_view.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match (ctx, out.as_mut()) {
                (None, Some(o)) => {
                    if !o.is_standard_layout() {
                        check_allocation("the ALiBi bias", bytes)?;
                    }
                    alibi::bias_cpu_into(&spec, o.view_mut()).map(|()| None)
                }
                (None, None) => alibi::bias_cpu(&spec).map(Some),
                (Some(ctx), out) => {
                    check_allocation("the ALiBi bias", bytes)?;
                    let bias = ctx.alibi_bias(&spec)?;
                    Ok(match out {
                        Some(o) => {
                            o.assign(&bias);
                            None
                        }
                        None => Some(bias),
                    })
                }
            }
        })
    })?;
    Ok((bias.map(|b| PyArray3::from_owned_array(py, b)), note))
}
