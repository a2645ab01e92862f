//! The `EnvService` messages both the unary RPCs and the `Session` stream read and answer:
//! `make`'s arguments, `reset`'s and `step`'s, and the responses built from an env's results.

use env_core::{EnvSpec, Kwargs, Options, Value};
use proto::convert::{self, ConvertError};
use proto::v1;

use super::state::State;
use super::status::ServerError;

/// `make`'s env id and kwargs. `stream`: the request came over a `Session` stream, the only
/// door that can serve host tools (it forwards their calls to the client).
pub(crate) fn parse_make(req: &v1::MakeRequest, stream: bool) -> Result<Kwargs, ServerError> {
    let kwargs = convert::json_object(&req.kwargs_json, "kwargs_json")?;
    let declares_tools = kwargs
        .get("tools")
        .is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty()));
    if declares_tools && !stream {
        return Err(ServerError::ToolsNeedStream);
    }
    Ok(kwargs)
}

pub(crate) fn parse_reset(req: &v1::ResetRequest) -> Result<(Option<u64>, Options), ServerError> {
    Ok((
        req.seed,
        convert::json_object(&req.options_json, "options_json")?,
    ))
}

pub(crate) fn parse_action(req: v1::StepRequest) -> Result<Value, ServerError> {
    Ok(convert::value_from_proto(
        req.action.ok_or(ConvertError::Missing("action"))?,
    )?)
}

pub(crate) fn make_response(state: &State, session_id: String, spec: &EnvSpec) -> v1::MakeResponse {
    let evaluate = state.registry.supports_evaluate(&spec.id).unwrap_or(false);
    v1::MakeResponse {
        session_id,
        spec: Some(convert::spec_to_proto(spec, evaluate)),
    }
}

pub(crate) fn reset_response((obs, info): (Value, env_core::Info)) -> v1::ResetResponse {
    v1::ResetResponse {
        observation: Some(convert::value_to_proto(&obs)),
        info_json: convert::json_text(&info),
    }
}
