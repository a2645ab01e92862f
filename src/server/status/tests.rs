//! The table is total and every renderer reads it.

use super::*;

/// One error of each kind; the match is exhaustive, so a new kind needs a sample here.
fn sample(kind: ErrorKind) -> ServerError {
    use ErrorKind as K;
    let s = || "x".to_string();
    match kind {
        K::MalformedId => EnvError::MalformedId(s()).into(),
        K::NameNotFound => EnvError::NameNotFound {
            name: s(),
            suggestion: None,
        }
        .into(),
        K::VersionNotFound => EnvError::VersionNotFound {
            name: s(),
            version: 9,
            available: vec![1],
        }
        .into(),
        K::UnregisteredEnv => EnvError::UnregisteredEnv(s()).into(),
        K::AlreadyRegistered => EnvError::AlreadyRegistered(s()).into(),
        K::ResetNeeded => EnvError::ResetNeeded.into(),
        K::EpisodeEnded => EnvError::EpisodeEnded.into(),
        K::InvalidAction => EnvError::InvalidAction(s()).into(),
        K::InvalidKwargs => EnvError::InvalidKwargs(s()).into(),
        K::InvalidOptions => EnvError::InvalidOptions(s()).into(),
        K::ClosedEnvironment => EnvError::ClosedEnvironment.into(),
        K::Unsupported => EnvError::Unsupported(s()).into(),
        K::FailedPrecondition => EnvError::FailedPrecondition(s()).into(),
        K::ResourceExhausted => EnvError::ResourceExhausted(s()).into(),
        K::Infrastructure => EnvError::Infrastructure(s()).into(),
        K::Panicked => EnvError::Panicked(s()).into(),
        K::Convert => ConvertError::Missing("action").into(),
        K::SessionNotFound => ServerError::SessionNotFound(s()),
        K::TooManySessions => ServerError::TooManySessions(1),
        K::ClientCapReached => ServerError::ClientCapReached(1),
        K::NoSession => ServerError::NoSession,
        K::SessionExists => ServerError::SessionExists,
        K::EmptyRequest => ServerError::EmptyRequest,
        K::TooLarge => ServerError::TooLarge {
            what: "Evaluate",
            got: 2,
            limit: 1,
        },
        K::BadPageToken => ServerError::BadPageToken(s()),
        K::DeadlineExceeded => ServerError::DeadlineExceeded(std::time::Duration::ZERO),
        K::EnvPanicked => ServerError::EnvPanicked,
        K::ShuttingDown => ServerError::ShuttingDown,
        K::ToolsNeedStream => ServerError::ToolsNeedStream,
        K::Internal => ServerError::Internal(s()),
        K::InvalidBody => ServerError::InvalidBody(json!([{"type": "missing"}])),
        K::BadBody => ServerError::BadBody(s()),
        K::BodyTooLarge => ServerError::BodyTooLarge(s()),
        K::Unauthenticated => ServerError::Unauthenticated,
        K::NoRoute => ServerError::NoRoute,
        K::UnknownDataset => ServerError::UnknownDataset(s()),
        K::UnknownPrompt => ServerError::UnknownPrompt {
            dataset: s(),
            id: s(),
        },
    }
}

#[test]
fn the_table_lists_every_kind_once_in_order() {
    assert_eq!(TABLE.len(), ErrorKind::ALL.len());
    for (i, (row, kind)) in TABLE.iter().zip(ErrorKind::ALL).enumerate() {
        assert_eq!(row.kind, *kind, "row {i}");
        assert_eq!(*kind as usize, i, "{kind:?}");
        assert_eq!(
            TABLE.iter().filter(|r| r.kind == *kind).count(),
            1,
            "{kind:?}"
        );
    }
}

#[test]
fn every_error_renders_its_row_on_every_protocol() {
    for row in &TABLE {
        let err = sample(row.kind);
        assert_eq!(err.kind(), row.kind);
        assert!(std::ptr::eq(err.row(), row));
        assert_eq!(err.http_status().as_u16(), row.http, "{:?}", row.kind);
        let frame = err.ws_frame(false, Map::new());
        assert_eq!(frame["data"]["code"], row.ws, "{:?}", row.kind);
        let refused = err.ws_frame(true, Map::new());
        assert_eq!(refused["data"]["code"], row.ws_refused, "{:?}", row.kind);
        assert_eq!(
            row.retry,
            matches!(
                row.grpc,
                Code::Unavailable | Code::ResourceExhausted | Code::DeadlineExceeded
            )
        );
        let wire = proto::v1::Error::from(&err);
        assert_eq!(wire.code, row.grpc as i32);
        assert_eq!(Status::from(err).code(), row.grpc, "{:?}", row.kind);
    }
}

#[test]
fn the_contract_codes() {
    let cases = [
        (
            EnvError::UnregisteredEnv("x/Y-v0".into()).into(),
            Code::NotFound,
            404,
        ),
        (
            EnvError::InvalidAction("a".into()).into(),
            Code::InvalidArgument,
            422,
        ),
        (
            ServerError::TooManySessions(1),
            Code::ResourceExhausted,
            429,
        ),
        (ServerError::ShuttingDown, Code::Unavailable, 503),
        (
            EnvError::Infrastructure("disk".into()).into(),
            Code::Unavailable,
            503,
        ),
        (ServerError::EnvPanicked, Code::Internal, 500),
    ];
    for (err, code, http) in cases {
        let err: ServerError = err;
        assert_eq!(err.code(), code, "{err}");
        assert_eq!(err.http_status().as_u16(), http, "{err}");
    }
}

/// `InvalidArgument` as gRPC spells it: `INVALID_ARGUMENT`.
fn grpc_name(code: Code) -> String {
    let mut out = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[test]
fn the_users_table_in_docs_is_this_table() {
    let docs = include_str!("../../../docs/errors.md");
    let lines: Vec<String> = TABLE
        .iter()
        .map(|r| {
            let retry = if r.retry { "yes" } else { "no" };
            format!(
                "| `{:?}` | {} | {} | {retry} | {} |",
                r.kind,
                grpc_name(r.grpc),
                r.http,
                r.ws
            )
        })
        .collect();
    let missing: Vec<_> = lines
        .iter()
        .filter(|l| !docs.contains(l.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/errors.md lacks these rows (the whole table follows):\n{missing:#?}\n{}",
        lines.join("\n")
    );
}
