//! A worker process for crash tests: runs one round through its lifecycle on the database given
//! as the first argument, printing `acknowledged <operation>` after each acknowledged step. Run
//! with `M3_FAULT_POINT` (and `M3_FAULT_HIT`) it is killed with SIGKILL at that point.
//!
//! Usage: `m3-test-fault-worker DB LEASE_TTL_MS`

use m3::{
    ElicitationResponse, ManagedInputStore, NewRound, OwnerClaim, SqliteManagedInputStore,
    StoreOptions,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let db = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: DB LEASE_TTL_MS"))?;
    let ttl: u64 = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: DB LEASE_TTL_MS"))?
        .parse()?;
    let store = SqliteManagedInputStore::open(&db, StoreOptions::default())?;
    let acknowledged = |op: &str| {
        println!("acknowledged {op}");
        let _ = std::io::stdout().flush();
    };
    let owner = OwnerClaim {
        owner_id: "crash-worker".into(),
        lease_ttl: Duration::from_millis(ttl),
    };
    let round = NewRound::new(
        "r1",
        "exec-1",
        "shipping",
        "book_shipment",
        m3_tests::address_requests(),
    )
    .owned_by(owner);
    let lease = store.create_round(&round)?.lease.expect("owned");
    acknowledged("create_round");
    let answer = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )]);
    store.submit_responses("r1", &answer, "address-r1")?;
    acknowledged("submit_responses");
    store.start_delivery("r1", &lease, "delivery-r1")?;
    acknowledged("start_delivery");
    store.mark_delivered("r1", &lease)?;
    acknowledged("mark_delivered");
    store.resolve("r1", &lease)?;
    acknowledged("resolve");
    Ok(())
}
