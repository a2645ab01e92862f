//! What every HTTP handler shares: the server's state plus the facades' own (the sandbox behind
//! `/run_code`, the datasets, the auth token, OpenEnv's kwargs), and the reading of request bodies
//! into the error table's failures.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use codegym_sandbox::Sandbox;
use env_core::Kwargs;
use serde_json::json;

use super::dataset_files::Datasets;
use crate::server::status::ServerError;

/// What every handler sees.
pub(crate) struct HttpState {
    pub server: Arc<crate::server::state::State>,
    pub sandbox: Arc<Sandbox>,
    pub datasets: Datasets,
    pub auth_token: Option<String>,
    /// OpenEnv `make` kwargs by canonical env id.
    pub openenv_kwargs: BTreeMap<String, Kwargs>,
}

/// A body axum could not read: over the size cap, or broken off.
pub(crate) fn body_rejected(rejection: BytesRejection) -> ServerError {
    let text = rejection.body_text();
    match rejection {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            ServerError::BodyTooLarge(text)
        }
        _ => ServerError::BadBody(text),
    }
}

/// FastAPI's validation failure for a body that is not JSON or does not fit the model.
pub(crate) fn invalid_json(e: &serde_json::Error) -> ServerError {
    let kind = match e.classify() {
        serde_json::error::Category::Data => "model_attributes_type",
        _ => "json_invalid",
    };
    ServerError::InvalidBody(
        json!([{ "type": kind, "loc": ["body"], "msg": e.to_string(), "input": null }]),
    )
}
