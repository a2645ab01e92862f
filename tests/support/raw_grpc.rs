//! A bare HTTP/2 gRPC client for unary calls (status only), for tests about what the *server* sends.
//!
//! tonic's own client enforces `grpc-timeout` itself and reports its own expiry as CANCELLED, so a
//! deadline test over tonic races the client's timer against the server's answer. This client sends
//! the header and waits for whatever the server answers: the status is the server's, always.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, BytesMut};

/// What the server answered: the gRPC status code and message.
#[derive(Debug)]
pub struct RawStatus {
    pub code: tonic::Code,
    pub message: String,
}

/// Calls `path` (e.g. `/codegym.v1.EnvService/Step`) with `grpc-timeout` set to `timeout`, sending
/// the request body `body_delay` after the headers (a slow uploader).
pub async fn unary<M: prost::Message>(
    addr: SocketAddr,
    path: &str,
    msg: &M,
    timeout: Duration,
    body_delay: Duration,
) -> RawStatus {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(connection);
    let mut client = client.ready().await.expect("h2 ready");
    let request = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", format!("{}m", timeout.as_millis()))
        .body(())
        .expect("request");
    let (response, mut send) = client.send_request(request, false).expect("send request");
    let body = msg.encode_to_vec();
    let mut frame = BytesMut::with_capacity(5 + body.len());
    frame.put_u8(0); // not compressed
    frame.put_u32(u32::try_from(body.len()).expect("small message"));
    frame.put_slice(&body);
    tokio::time::sleep(body_delay).await;
    send.send_data(frame.freeze(), true).expect("send body");

    let (parts, mut body) = response.await.expect("response headers").into_parts();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("response body");
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    // A trailers-only response (every error tonic sends) carries the status in the headers.
    let trailers = body.trailers().await.expect("trailers").unwrap_or_default();
    let status_from = |name: &str| {
        trailers
            .get(name)
            .or_else(|| parts.headers.get(name))
            .map(|v| v.to_str().expect("ascii header").to_owned())
    };
    let code = tonic::Code::from_i32(
        status_from("grpc-status")
            .expect("grpc-status")
            .parse()
            .expect("numeric grpc-status"),
    );
    let message = status_from("grpc-message").unwrap_or_default();
    RawStatus { code, message }
}
