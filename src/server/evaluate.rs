//! `Evaluate` and `EvaluateStream`: stateless batch scoring, answered whole or item by item.
//!
//! Both parse the request the same way (a malformed item fails alone), run the items through the
//! env's `BatchEvaluator::evaluate_each`, and differ only in delivery: `Evaluate` waits for every
//! item and answers in item order; `EvaluateStream` sends each result as it finishes, so a trainer
//! can start on the first rewards while slow programs still run. A stream's task stops (and the
//! items still running are dropped, which kills their programs) when the client goes away.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use env_core::{BatchEvaluator, EvalItem, Kwargs, Result as EnvResult, Step, Value};
use futures::{FutureExt, StreamExt};
use proto::convert::{self, ConvertError};
use proto::v1;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tracing::Instrument;

use super::deadline::{self, Deadline};
use super::state::State;
use super::status::ServerError;

/// A parsed `EvaluateRequest`: the env's evaluator, its kwargs, the well-formed items with their
/// positions in the request, and the malformed ones' errors.
struct Batch {
    evaluator: Arc<dyn BatchEvaluator>,
    kwargs: Kwargs,
    items: Vec<EvalItem>,
    /// `positions[i]`: the request index of `items[i]`.
    positions: Vec<usize>,
    malformed: Vec<(usize, ServerError)>,
}

fn parse(state: &State, req: v1::EvaluateRequest) -> Result<Batch, ServerError> {
    let limit = state.config.max_evaluate_items;
    if req.items.len() > limit {
        return Err(ServerError::TooLarge {
            what: "Evaluate",
            got: req.items.len(),
            limit,
        });
    }
    let evaluator = state.registry.evaluator(&req.env_id)?;
    let kwargs = convert::json_object(&req.kwargs_json, "kwargs_json")?;
    let mut batch = Batch {
        evaluator,
        kwargs,
        items: Vec::new(),
        positions: Vec::new(),
        malformed: Vec::new(),
    };
    for (index, item) in req.items.into_iter().enumerate() {
        match parse_item(item) {
            Ok(item) => {
                batch.items.push(item);
                batch.positions.push(index);
            }
            Err(e) => batch.malformed.push((index, e)),
        }
    }
    Ok(batch)
}

fn parse_item(item: v1::EvaluateItem) -> Result<EvalItem, ServerError> {
    Ok(EvalItem {
        seed: item.seed,
        options: convert::json_object(&item.options_json, "options_json")?,
        action: convert::value_from_proto(item.action.ok_or(ConvertError::Missing("action"))?)?,
    })
}

fn to_result(outcome: Result<Step<Value>, ServerError>) -> v1::EvaluateResult {
    match outcome {
        Ok(step) => v1::EvaluateResult {
            step: Some(convert::step_to_proto(&step)),
            error: None,
        },
        Err(e) => v1::EvaluateResult {
            step: None,
            error: Some((&e).into()),
        },
    }
}

/// The unary `Evaluate`: every result, in item order.
pub(crate) async fn unary(
    state: &State,
    deadline: Option<Deadline>,
    req: v1::EvaluateRequest,
) -> Result<v1::EvaluateResponse, ServerError> {
    let batch = parse(state, req)?;
    let total = batch.items.len() + batch.malformed.len();
    let mut slots: Vec<Option<v1::EvaluateResult>> = (0..total).map(|_| None).collect();
    for (index, e) in batch.malformed {
        slots[index] = Some(to_result(Err(e)));
    }
    let (evaluator, kwargs, items) = (batch.evaluator, batch.kwargs, batch.items);
    let evaluated = deadline::within(deadline, async move {
        // A panicking evaluator fails this call only.
        AssertUnwindSafe(evaluator.evaluate(kwargs, items))
            .catch_unwind()
            .await
            .map_err(|_| ServerError::EnvPanicked)?
            .map_err(ServerError::from)
    })
    .in_current_span()
    .await?;
    for (position, result) in batch.positions.into_iter().zip(evaluated) {
        slots[position] = Some(to_result(result.map_err(ServerError::from)));
    }
    let results = slots
        .into_iter()
        .map(|slot| slot.unwrap_or_else(|| to_result(Err(ServerError::EnvPanicked))))
        .collect();
    Ok(v1::EvaluateResponse { results })
}

/// Results in flight between the evaluating task and tonic: enough to never stall a fast batch,
/// few enough that a client that stops reading holds back the evaluation.
const STREAM_BUFFER: usize = 64;

/// The streaming `EvaluateStream`: a task evaluates, the returned receiver is the response stream.
/// Errors of the whole call are known before anything runs and are returned as the call's status.
pub(crate) fn stream(
    state: &State,
    deadline: Option<Deadline>,
    req: v1::EvaluateRequest,
) -> Result<ReceiverStream<Result<v1::EvaluateStreamResponse, Status>>, ServerError> {
    let batch = parse(state, req)?;
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let span = tracing::Span::current();
    tokio::spawn(
        async move {
            let sent = deadline::within(deadline, send_all(batch, &tx)).await;
            if let Err(e) = sent {
                // The client may be gone already; then there is no one to tell.
                let _ = tx.send(Err(Status::from(e))).await;
            }
        }
        .instrument(span),
    );
    Ok(ReceiverStream::new(rx))
}

type Sender = mpsc::Sender<Result<v1::EvaluateStreamResponse, Status>>;

/// Sends every item's result as it finishes. Returns early (dropping the items still running) when
/// the client has gone away.
async fn send_all(batch: Batch, tx: &Sender) -> Result<(), ServerError> {
    let send = |index: usize, result: EnvResult<Step<Value>>| {
        let message = v1::EvaluateStreamResponse {
            index: index as u32,
            result: Some(to_result(result.map_err(ServerError::from))),
        };
        tx.send(Ok(message))
    };
    for (index, e) in batch.malformed {
        let message = v1::EvaluateStreamResponse {
            index: index as u32,
            result: Some(to_result(Err(e))),
        };
        if tx.send(Ok(message)).await.is_err() {
            return Ok(());
        }
    }
    let (evaluator, positions) = (batch.evaluator, batch.positions);
    let evaluated = AssertUnwindSafe(async {
        let mut results = evaluator.evaluate_each(batch.kwargs, batch.items).await?;
        while let Some((i, result)) = results.next().await {
            let Some(&position) = positions.get(i) else {
                return Err(env_core::EnvError::Infrastructure(format!(
                    "the evaluator yielded item {i} of {}",
                    positions.len()
                )));
            };
            if send(position, result).await.is_err() {
                break; // the client went away
            }
        }
        Ok(())
    })
    .catch_unwind()
    .await;
    match evaluated {
        Ok(done) => done.map_err(ServerError::from),
        Err(_) => Err(ServerError::EnvPanicked),
    }
}
