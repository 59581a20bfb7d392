//! What the shared-store tests (`redis_source`, `postgres_source`) use to stage an outage: a loopback
//! TCP proxy to the store that can be cut. A real limiter connects through it while the store is up,
//! then loses it for good, as when the store or the network goes away mid-run.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A loopback proxy to `upstream`: [`Proxy::cut`] drops every connection through it and refuses new
/// ones (its listener goes with its accept task).
pub struct Proxy {
    /// Where to connect instead of the store.
    pub addr: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    /// Listens on an ephemeral loopback port and pipes each connection to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let registry = tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let pipe = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                registry.lock().unwrap().push(pipe);
            }
        });
        tasks.lock().unwrap().push(accept);
        Proxy { addr, tasks }
    }

    /// The outage: every connection through the proxy is dropped and new ones are refused.
    pub fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}
