//! `make bench`: agents on one broker (issue 17 goal 7). On a private vhost
//! it declares `--queues N` idle command queues exactly as host agents
//! declare theirs (`cmd.<machine_id>`, `host_agent::declare_command_queue`:
//! classic, version 2, bounded, expiring), and reads the node's memory and
//! file handles from the management API (`/api/nodes`: `mem_used`,
//! `fd_used`) before and after. It prints the broker memory per idle queue
//! and `ratio broker_100k_agents_mem_per_node_vs_watermark`: the memory
//! 100,000 such queues would take, as a share of the node's memory high
//! watermark (`mem_limit`). The vhost, with its queues, is deleted at the
//! end (and when a step fails).
//!
//! Flags: `--queues N` (default 100000; 1000 with `--tiny`). It stops
//! declaring early when the node passes half its watermark, so that a
//! shared broker never raises its memory alarm; the figures are per queue
//! either way. `--connections M` (default 1000; 20 with `--tiny`) simulated
//! agents then connect from this one process, each on its own connection
//! declaring and consuming its queue, for the memory and file handles of a
//! connected machine: `ratio broker_100k_connected_agents_mem_vs_watermark`
//! and `ratio broker_100k_connected_agents_fd_vs_limit` (100,000 of them,
//! queues included, against the node's watermark and file handle limit).

use contracts::ids::MachineId;
use std::time::{Duration, Instant};

use anyhow::Context;
use host_agent::lapin::{Connection, ConnectionProperties};
use platform::Config;
use platform::rabbitmq_admin::{NodeStats, RabbitAdmin};
use reqwest::Url;
use uuid::Uuid;

mod common;
use common::{Goal, machine_facts, ratio, sized};

/// Declarations in flight on one channel.
const WINDOW: usize = 256;

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench())
}

async fn bench() -> anyhow::Result<()> {
    let queues = sized("--queues", 100_000, 1000);
    let connections = sized("--connections", 1000, 20);
    let config = Config::from_env()?;
    let admin = RabbitAdmin::new(&config.rabbitmq_management_url)?;
    let vhost = format!("gpumarket_bench_agents_{}", Uuid::now_v7().simple());
    let outcome = async {
        admin.put_vhost(&vhost).await?;
        // Connections first: the small figure is read before the queue run
        // leaves garbage for the node to collect under it.
        let connected = measure_connected(&config, &admin, &vhost, connections).await?;
        let idle = measure(&config, &admin, &vhost, queues).await?;
        anyhow::Ok((idle, connected))
    }
    .await;
    // The vhost goes whatever happened, its queues with it.
    let deleted = delete_vhost(&admin, &vhost).await;
    let ((declared, seconds, before, after, limit), connected) = outcome?;
    deleted?;
    let (agents, c_before, c_after) = connected;
    let mem_per_agent = grew(c_before.mem_used, c_after.mem_used).max(0.0) / agents.max(1) as f64;
    let fd_per_agent = grew(c_before.fd_used, c_after.fd_used).max(0.0) / agents.max(1) as f64;
    let fd_limit = c_after.fd_total as f64;
    let fd_share = if fd_limit > 0.0 {
        fd_per_agent * 100_000.0 / fd_limit
    } else {
        f64::NAN
    };

    let per_queue = grew(before.mem_used, after.mem_used).max(0.0) / declared.max(1) as f64;
    let fd_per_queue = grew(before.fd_used, after.fd_used) / declared.max(1) as f64;
    let at_100k = per_queue * 100_000.0;
    let share = if limit > 0.0 {
        at_100k / limit
    } else {
        f64::NAN
    };
    let mib = |b: f64| b / 1024.0 / 1024.0;
    let line = ratio(
        "broker_100k_agents_mem_per_node_vs_watermark",
        share,
        Goal::AtMost(0.5),
    );
    let connected_share = if limit > 0.0 {
        mem_per_agent * 100_000.0 / limit
    } else {
        f64::NAN
    };
    let connected_line = ratio(
        "broker_100k_connected_agents_mem_vs_watermark",
        connected_share,
        Goal::AtMost(1.0),
    );
    let fd_line = ratio(
        "broker_100k_connected_agents_fd_vs_limit",
        fd_share,
        Goal::AtMost(1.0),
    );
    let section = format!(
        "## Agents on one broker\n\n\
         `make bench` (`cargo bench --bench agents -- --queues {queues}`), run {date} on {facts}, \
         one RabbitMQ node, {declared} queues declared.\n\n\
         {declared} idle command queues declared as host agents declare theirs (`cmd.<machine_id>`: \
         classic, `x-queue-version` 2, durable, `x-expires` and `x-message-ttl` 10 min, \
         `x-max-length` 1000, `reject-publish`) on a private vhost, in {seconds:.1} s; the node's \
         `mem_used` and `fd_used` (management API `/api/nodes`) before and after.\n\n\
         | figure | value |\n| --- | --- |\n\
         | node memory before | {b:.0} MiB |\n\
         | node memory after | {a:.0} MiB |\n\
         | memory per idle queue | {pq:.1} KiB |\n\
         | file handles per idle queue | {fd:.3} |\n\
         | 100,000 queues | {k100:.0} MiB |\n\
         | memory high watermark | {l:.0} MiB |\n\n\
         `{line}`\n\n\
         Connected agents: {agents} simulated agents from this one process, each its own AMQP \
         connection (16 KiB frames, as agents connect) with one channel, declaring its command \
         queue and consuming it, as `gpumarket agent` does; the node before and after.\n\n\
         | figure | value |\n| --- | --- |\n\
         | memory per connected agent (connection, channel, consumer and its queue) | {ma:.1} KiB |\n\
         | file handles per connected agent | {fa:.2} |\n\
         | node file handle limit (`fd_total`) | {fl:.0} |\n\
         | 100,000 connected agents | {kc:.0} MiB |\n\n\
         A node serves as many connections as its file handle limit allows (one each): \
         100,000 agents need `LimitNOFILE` (or `ulimit -n`) well above 100,000 on the node, and \
         the connections' memory, not the queues', decides how many fit one node \
         (docs/scaling.md).\n\n\
         `{connected_line}`\n\n\
         `{fd_line}`\n\n",
        date = chrono::Utc::now().format("%Y-%m-%d"),
        facts = machine_facts(),
        b = mib(before.mem_used as f64),
        a = mib(after.mem_used as f64),
        pq = per_queue / 1024.0,
        fd = fd_per_queue,
        k100 = mib(at_100k),
        l = mib(limit),
        ma = mem_per_agent / 1024.0,
        fa = fd_per_agent,
        fl = fd_limit,
        kc = mib(mem_per_agent * 100_000.0),
    );
    common::write_section("## Agents on one broker", &section)?;
    Ok(())
}

/// Deletes the vhost and waits until the broker lists it no more. Deleting
/// a vhost of tens of thousands of queues outlasts an HTTP request (the
/// management listener gives up after a minute while the broker goes on), so
/// the DELETE is repeated until a GET answers 404.
async fn delete_vhost(admin: &RabbitAdmin, vhost: &str) -> anyhow::Result<()> {
    for _ in 0..30 {
        if let Err(error) = admin.delete_vhost(vhost).await {
            println!("deleting {vhost}: {error}; looking again");
        }
        if !admin.vhost_exists(vhost).await.unwrap_or(true) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    anyhow::bail!("vhost {vhost} still there: delete it by hand")
}

/// Deletes the queues over AMQP, a window at a time (far faster than the
/// broker deleting them one by one with their vhost).
async fn delete_queues(
    channel: &host_agent::lapin::Channel,
    names: &[String],
) -> anyhow::Result<()> {
    for window in names.chunks(WINDOW) {
        let pending = window
            .iter()
            .map(|name| channel.queue_delete(name.as_str().into(), Default::default()));
        for result in futures_util::future::join_all(pending).await {
            result?;
        }
    }
    Ok(())
}

/// Connects `agents` simulated agents to `vhost`, each on its own
/// connection declaring and consuming its command queue (what a connected
/// `gpumarket agent` holds on the broker), and reads the node before and
/// after; then closes them and deletes their queues.
async fn measure_connected(
    config: &Config,
    admin: &RabbitAdmin,
    vhost: &str,
    agents: usize,
) -> anyhow::Result<(usize, NodeStats, NodeStats)> {
    let mut url = Url::parse(&config.amqp_url).context("amqp url")?;
    url.set_path(&format!("/{}", vhost));
    let url = platform::broker::with_frame_max(url.as_str());
    tokio::time::sleep(Duration::from_secs(8)).await;
    let before = admin.node_stats().await?;
    // One file handle per connection: stay well inside the node's limit, so
    // a shared broker keeps serving everyone else (a default node has 1024).
    let headroom = (grew(before.fd_used, before.fd_total) * 0.8).max(1.0) as usize;
    if agents > headroom {
        println!("{agents} connections would crowd the node's file handles: connecting {headroom}");
    }
    let agents = agents.min(headroom);
    let mut held = Vec::with_capacity(agents);
    let mut names = Vec::with_capacity(agents);
    for _ in 0..agents {
        let conn = Connection::connect(&url, ConnectionProperties::default()).await?;
        let channel = conn.create_channel().await?;
        let machine = Uuid::now_v7();
        host_agent::declare_command_queue(&channel, MachineId(machine))
            .await
            .map_err(|e| anyhow::anyhow!("declare: {e}"))?;
        let name = host_agent::protocol::command_queue(machine);
        let consumer = channel
            .basic_consume(
                name.as_str().into(),
                "bench".into(),
                Default::default(),
                Default::default(),
            )
            .await?;
        names.push(name);
        held.push((conn, channel, consumer));
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = admin.node_stats().await?;
    let cleanup = held.first().map(|(_, channel, _)| channel.clone());
    if let Some(channel) = cleanup {
        delete_queues(&channel, &names).await?;
    }
    for (conn, _, _) in held {
        let _ = conn.close(200, "done".into()).await;
    }
    Ok((agents, before, after))
}

/// Declares up to `queues` command queues on `vhost`; how many, in how many
/// seconds, the node before and after (settled), and its watermark.
async fn measure(
    config: &Config,
    admin: &RabbitAdmin,
    vhost: &str,
    queues: usize,
) -> anyhow::Result<(usize, f64, NodeStats, NodeStats, f64)> {
    let mut url = Url::parse(&config.amqp_url).context("amqp url")?;
    url.set_path(&format!("/{}", vhost));
    let conn = Connection::connect(url.as_str(), ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    // The node's figures refresh every few seconds: let the closed agent
    // connections leave them first.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let before = admin.node_stats().await?;
    let limit = before.mem_limit as f64;
    let started = Instant::now();
    let mut declared = 0;
    let mut names = Vec::with_capacity(queues);
    while declared < queues {
        let batch = WINDOW.min(queues - declared);
        let mut pending = Vec::with_capacity(batch);
        for _ in 0..batch {
            let channel = channel.clone();
            let machine = Uuid::now_v7();
            names.push(host_agent::protocol::command_queue(machine));
            pending.push(async move {
                host_agent::declare_command_queue(&channel, MachineId(machine)).await
            });
        }
        for result in futures_util::future::join_all(pending).await {
            result.map_err(|e| anyhow::anyhow!("declare: {e}"))?;
        }
        declared += batch;
        if declared % 10_000 < WINDOW {
            let NodeStats {
                mem_used: used,
                mem_limit: limit,
                ..
            } = admin.node_stats().await?;
            println!(
                "{declared} queues, node memory {:.0} MiB",
                used as f64 / 1024.0 / 1024.0
            );
            if limit > 0 && used > limit / 2 {
                println!("past half the watermark: stopping at {declared}");
                break;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    // The management API's node figures refresh every few seconds.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = admin.node_stats().await?;
    delete_queues(&channel, &names).await?;
    let _ = conn.close(200, "done".into()).await;
    Ok((declared, seconds, before, after, limit))
}

/// How much a node figure moved from `before` to `after` (negative when it
/// fell).
fn grew(before: u64, after: u64) -> f64 {
    after as f64 - before as f64
}
