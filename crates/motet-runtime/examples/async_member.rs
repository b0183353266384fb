//! A member used from async code (feature `tokio`): its events are a `Stream`.
//! Run: `cargo run -p motet-runtime --features tokio --example async_member`.

#[cfg(feature = "tokio")]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use futures_util::StreamExt;
    use motet_runtime::{Event, GroupConfig, Runtime, RuntimeConfig};

    let runtime = Runtime::start(RuntimeConfig::default())?;
    let mut member = runtime.join_async(GroupConfig::new("async-example"))?;
    // Alone in the group: its own casts come back (local delivery).
    while let Some(event) = member.next().await {
        match event {
            Event::View(view) => {
                println!("view {:?}: {} member(s)", view.id, view.members.len());
                member.cast("hello, async world").await?;
            }
            Event::Cast { data, .. } => {
                println!("delivered: {}", String::from_utf8_lossy(&data));
                member.leave().await?;
            }
            Event::Exit => break,
            _ => {}
        }
    }
    // Leaves under way are waited for (here for up to 5 s) without blocking the async thread.
    runtime.shutdown_async(std::time::Duration::from_secs(5)).await;
    Ok(())
}

#[cfg(not(feature = "tokio"))]
fn main() {
    eprintln!(
        "this example needs the `tokio` feature: cargo run -p motet-runtime --features tokio --example async_member"
    );
}
