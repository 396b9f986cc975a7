//! A tiny HTTP/1.1 client over a bare TCP socket: it sends exactly the bytes it is given, at the
//! pace it is told, and parses whatever comes back until the server closes the connection. For
//! the requests no well-behaved client can be made to send: broken request lines, lying lengths,
//! pipelines, bytes that are not UTF-8.

use std::io::ErrorKind;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;

/// How the request bytes go out.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// All at once; our side stays open until the server closes the connection.
    AtOnce,
    /// All at once, then the write side is shut: the client says it will send nothing more.
    ThenShut,
    /// The first `head` bytes at once, then one byte every `every`, our side held open.
    Trickle { head: usize, every: Duration },
}

/// One response as read off the wire; `1xx` interim responses are skipped.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Sends `bytes` to `addr` and reads until the server closes the connection; `Err` when that
/// does not happen within `bound` (the server hung) or when what came back is not HTTP.
/// `bodiless`: the responses answer HEAD requests and carry no body whatever their length says.
pub async fn exchange(
    addr: &str,
    bytes: Vec<u8>,
    pace: Pace,
    bodiless: bool,
    bound: Duration,
) -> Result<Vec<RawResponse>, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut reader, writer) = stream.into_split();
    let writing = tokio::spawn(write(writer, bytes, pace));
    let mut received = Vec::new();
    let read = tokio::time::timeout(bound, async {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buffer).await {
                Ok(0) => return Ok(()),
                Ok(n) => received.extend_from_slice(&buffer[..n]),
                // A server that closes with our bytes unread resets the connection; what it
                // answered before is already here.
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(()),
                Err(e) => return Err(format!("reading from the server: {e}")),
            }
        }
    })
    .await;
    // Dropping the write half (with the task) closes our side; the server is done anyway.
    writing.abort();
    match read {
        Err(_) => Err(format!(
            "the connection was still open after {bound:?}; received so far: {}",
            preview(&received)
        )),
        Ok(Err(e)) => Err(e),
        Ok(Ok(())) => parse(&received, bodiless),
    }
}

/// Writes per `pace`; write errors end the writing quietly (the server may answer and close
/// before it has read everything, which is the point of many cases). Then holds the write half,
/// so that our side stays open, until the task is aborted.
async fn write(mut writer: OwnedWriteHalf, bytes: Vec<u8>, pace: Pace) {
    let _ = match pace {
        Pace::AtOnce => writer.write_all(&bytes).await,
        Pace::ThenShut => match writer.write_all(&bytes).await {
            Ok(()) => writer.shutdown().await,
            Err(e) => Err(e),
        },
        Pace::Trickle { head, every } => trickle(&mut writer, &bytes, head, every).await,
    };
    std::future::pending::<()>().await;
}

async fn trickle(
    writer: &mut OwnedWriteHalf,
    bytes: &[u8],
    head: usize,
    every: Duration,
) -> std::io::Result<()> {
    let (first, rest) = bytes.split_at(head.min(bytes.len()));
    writer.write_all(first).await?;
    for byte in rest {
        tokio::time::sleep(every).await;
        writer.write_all(std::slice::from_ref(byte)).await?;
    }
    Ok(())
}

/// Every response in `bytes`, in order.
fn parse(mut bytes: &[u8], bodiless: bool) -> Result<Vec<RawResponse>, String> {
    let mut responses = Vec::new();
    while !bytes.is_empty() {
        let end = find(bytes, b"\r\n\r\n")
            .ok_or_else(|| format!("an incomplete response head: {}", preview(bytes)))?;
        let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
        bytes = &bytes[end + 4..];
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status: u16 = status_line
            .strip_prefix("HTTP/1.")
            .and_then(|rest| rest.get(2..5))
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("not a status line: {status_line:?}"))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
            .collect();
        if (100..200).contains(&status) {
            continue;
        }
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let body = if bodiless || status == 204 || status == 304 {
            Vec::new()
        } else if let Some(length) = header("content-length") {
            let length: usize = length
                .parse()
                .map_err(|_| format!("a bad content-length: {length:?}"))?;
            if bytes.len() < length {
                return Err(format!(
                    "a {status} response cut short: {} of {length} body bytes",
                    bytes.len()
                ));
            }
            let (body, rest) = bytes.split_at(length);
            bytes = rest;
            body.to_vec()
        } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            dechunk(&mut bytes)?
        } else {
            std::mem::take(&mut bytes).to_vec()
        };
        responses.push(RawResponse {
            status,
            headers,
            body,
        });
    }
    Ok(responses)
}

/// A chunked body from the front of `bytes`, which is advanced past it and its trailers.
fn dechunk(bytes: &mut &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = find(bytes, b"\r\n").ok_or("a chunk size line cut short")?;
        let line = String::from_utf8_lossy(&bytes[..line_end]).into_owned();
        let size = line.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size, 16).map_err(|_| format!("a bad chunk size: {line:?}"))?;
        *bytes = &bytes[line_end + 2..];
        if size == 0 {
            let end = find(bytes, b"\r\n")
                .filter(|&at| at == 0)
                .map(|_| 2)
                .or_else(|| find(bytes, b"\r\n\r\n").map(|at| at + 4))
                .ok_or("chunked trailers cut short")?;
            *bytes = &bytes[end..];
            return Ok(body);
        }
        if bytes.len() < size + 2 {
            return Err("a chunk cut short".into());
        }
        body.extend_from_slice(&bytes[..size]);
        *bytes = &bytes[size + 2..];
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The start of `bytes`, readable.
pub fn preview(bytes: &[u8]) -> String {
    const SHOWN: usize = 300;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(SHOWN)]).into_owned();
    if bytes.len() > SHOWN {
        format!("{text:?}… ({} bytes)", bytes.len())
    } else {
        format!("{text:?}")
    }
}
