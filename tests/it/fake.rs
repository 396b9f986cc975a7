//! A fake HTTP service on 127.0.0.1 that records every request and answers as the test says:
//! a model provider, a chat API, anything hookgate calls out to.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How the fake answers.
#[derive(Debug, Clone)]
pub enum Answer {
    Json(u16, Value),
    Text(u16, String),
    /// Waits, then answers.
    After(Duration, Box<Answer>),
    /// Answers with this header added.
    Header(&'static str, String, Box<Answer>),
    /// Waits for a permit of the gate (which it keeps), then answers: the test says when.
    Gated(Arc<tokio::sync::Semaphore>, Box<Answer>),
}

type Responder = Arc<dyn Fn(&Recorded, usize) -> Answer + Send + Sync>;

/// The fake service; stops with the test's runtime.
#[derive(Clone)]
pub struct Fake {
    pub base: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    responder: Arc<Mutex<Responder>>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

impl Fake {
    /// Starts a fake that answers every request with `respond(request, index)`.
    pub async fn start(
        respond: impl Fn(&Recorded, usize) -> Answer + Send + Sync + 'static,
    ) -> Fake {
        Fake::start_on(0, respond).await
    }

    /// The same, on `port` of 127.0.0.1 (0: any free port): a provider that was down, refusing
    /// connections to its address, comes up there.
    pub async fn start_on(
        port: u16,
        respond: impl Fn(&Recorded, usize) -> Answer + Send + Sync + 'static,
    ) -> Fake {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let fake = Fake {
            base: format!("http://{}", listener.local_addr().unwrap()),
            requests: Arc::default(),
            responder: Arc::new(Mutex::new(Arc::new(respond))),
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
        };
        let state = fake.clone();
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                async move { state.handle(method, uri, headers, body).await }
            },
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        fake
    }

    /// A model provider that replies `reply` to every chat completion.
    pub async fn provider(reply: &'static str) -> Fake {
        Fake::start(move |_, _| Answer::Json(200, chat_reply(reply))).await
    }

    /// A model provider that replies `reply` to every chat completion, each after `after`.
    pub async fn slow_provider(after: Duration, reply: &'static str) -> Fake {
        Fake::start(move |_, _| {
            Answer::After(after, Box::new(Answer::Json(200, chat_reply(reply))))
        })
        .await
    }

    /// Changes how later requests are answered.
    pub fn respond_with(
        &self,
        respond: impl Fn(&Recorded, usize) -> Answer + Send + Sync + 'static,
    ) {
        *self.responder.lock().unwrap() = Arc::new(respond);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    async fn handle(&self, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
        let recorded = Recorded {
            method: method.to_string(),
            path: uri.path_and_query().map_or("/".into(), |p| p.to_string()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
                .collect(),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        let index = {
            let mut requests = self.requests.lock().unwrap();
            requests.push(recorded.clone());
            requests.len() - 1
        };
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let responder = self.responder.lock().unwrap().clone();
        let mut answer = responder(&recorded, index);
        let mut headers = Vec::new();
        let response = loop {
            match answer {
                Answer::After(delay, next) => {
                    tokio::time::sleep(delay).await;
                    answer = *next;
                }
                Answer::Header(name, value, next) => {
                    headers.push((name, value));
                    answer = *next;
                }
                Answer::Gated(gate, next) => {
                    gate.acquire().await.unwrap().forget();
                    answer = *next;
                }
                Answer::Json(status, body) => {
                    break (StatusCode::from_u16(status).unwrap(), axum::Json(body))
                        .into_response();
                }
                Answer::Text(status, body) => {
                    break (StatusCode::from_u16(status).unwrap(), body).into_response();
                }
            }
        };
        let mut response = response;
        for (name, value) in headers {
            response.headers_mut().insert(name, value.parse().unwrap());
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        response
    }
}

/// A chat-completions response carrying `content`.
pub fn chat_reply(content: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})
}
