//! A node's share of the cluster's work: the projection of the stream into the view, and one
//! pull loop per durable consumer (runs, heartbeats, deliveries) that takes only as many messages
//! as the node has free slots and hands each to its worker in a task of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::Message;
use futures_util::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::work::{FINISH_GRACE, RETRY};
use super::{Cluster, Consumer};
use crate::gateway::context::{Context, Worker, WorkerName};

/// How long a pull waits for messages before asking again.
const PULL_EXPIRES: Duration = Duration::from_secs(5);

/// Starts the projection and the workers of a node on the cluster.
pub fn start_workers(ctx: &Context, cluster: &Cluster) -> Vec<Worker> {
    let slots = ctx.config.current().runtime.max_concurrent;
    let runner = {
        let (ctx, cluster) = (ctx.clone(), cluster.clone());
        consume(cluster.clone(), Consumer::Runner, slots, move |message| {
            super::run::run(ctx.clone(), cluster.clone(), message)
        })
    };
    let heartbeat = {
        let (ctx, cluster) = (ctx.clone(), cluster.clone());
        consume(cluster.clone(), Consumer::Heartbeat, 1, move |message| {
            super::dispatch::beat(ctx.clone(), cluster.clone(), message)
        })
    };
    let delivery = {
        let (ctx, cluster) = (ctx.clone(), cluster.clone());
        consume(cluster.clone(), Consumer::Delivery, slots, move |message| {
            super::dispatch::deliver(ctx.clone(), cluster.clone(), message)
        })
    };
    vec![
        Worker::spawn(
            WorkerName::Projection,
            super::project(cluster.clone(), ctx.store.clone()),
        ),
        Worker::spawn(WorkerName::Runner, runner),
        Worker::spawn(WorkerName::Heartbeat, heartbeat),
        Worker::spawn(WorkerName::Delivery, delivery),
        Worker::spawn(
            WorkerName::HeartbeatClock,
            super::dispatch::clock(ctx.clone(), cluster.clone()),
        ),
        Worker::spawn(
            WorkerName::Release,
            super::held::release_loop(ctx.clone(), cluster.clone()),
        ),
        Worker::spawn(
            WorkerName::Batches,
            super::batches::closer(ctx.clone(), cluster.clone()),
        ),
        Worker::spawn(
            WorkerName::Webhooks,
            super::webhooks::sender(ctx.clone(), cluster.clone()),
        ),
    ]
}

/// Pulls from the durable consumer `name` at most `slots` messages at a time and hands each to `handle` in
/// a task of its own, until the process ends.
async fn consume<F, Fut>(cluster: Cluster, name: Consumer, slots: usize, handle: F)
where
    F: Fn(Message) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(slots));
    'consumer: loop {
        let consumer = match cluster.consumer(name).await {
            Ok(consumer) => consumer,
            Err(err) => {
                tracing::warn!(%err, "cannot pull work");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        loop {
            // Wait for a free slot before asking for work, then ask for as many as are free.
            let Ok(first) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let mut permits = vec![first];
            while let Ok(permit) = Arc::clone(&slots).try_acquire_owned() {
                permits.push(permit);
            }
            let batch = consumer
                .batch()
                .max_messages(permits.len())
                .expires(PULL_EXPIRES)
                .messages()
                .await;
            let mut batch = match batch {
                Ok(batch) => batch,
                Err(err) => {
                    tracing::warn!(%err, consumer = name.durable_name(), "cannot pull work");
                    tokio::time::sleep(RETRY).await;
                    break;
                }
            };
            let reconnection = cluster.reconnection();
            tokio::pin!(reconnection);
            loop {
                let message = tokio::select! {
                    message = batch.next() => message,
                    () = &mut reconnection => None,
                };
                let Some(message) = message else { break };
                let message = match message {
                    Ok(message) => message,
                    Err(err) => {
                        // A consumer deleted, a leader being elected: pull again after a pause,
                        // the consumer looked up (or created) afresh.
                        tracing::warn!(%err, consumer = name.durable_name(), "pull failed");
                        tokio::time::sleep(RETRY).await;
                        continue 'consumer;
                    }
                };
                let Some(permit) = permits.pop() else { break };
                let reply = message.reply.clone();
                spawn_work(&cluster, reply, handle(message), permit);
            }
        }
    }
}

/// Runs `work` in a task of its own, which holds `permit` (its slot) until it ends. When the
/// node stops, the work has [`FINISH_GRACE`] to finish; then it is dropped and its message,
/// answered at `reply`, handed back.
fn spawn_work(
    cluster: &Cluster,
    reply: Option<async_nats::Subject>,
    work: impl Future<Output = ()> + Send + 'static,
    permit: OwnedSemaphorePermit,
) {
    let (client, in_flight) = (cluster.client.clone(), cluster.in_flight.clone());
    let guard = in_flight.enter();
    tokio::spawn(async move {
        tokio::pin!(work);
        tokio::select! {
            () = &mut work => {}
            () = in_flight.stopping() => {
                // The node is stopping: a moment to finish (a send, an outcome being recorded),
                // then the work is dropped where it stands and its message handed back for
                // another node to take at once.
                let finished = tokio::time::timeout(FINISH_GRACE, &mut work).await;
                if let (Err(_), Some(reply)) = (finished, reply) {
                    let _ = client.publish(reply, "-NAK".into()).await;
                }
            }
        }
        drop((permit, guard));
    });
}
