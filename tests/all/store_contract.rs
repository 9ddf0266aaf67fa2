use m3::*;
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;

#[test]
fn smoke_full_lifecycle() {
    let db = TempDb::new();
    let store = db.store();
    let lease = create(&store, &address_round("r1"));
    let responses = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )]);
    let rec = store.submit_responses("r1", &responses, "k1").unwrap();
    assert_eq!(rec.status, ManagedInputStatus::ResponseValidated);
    store.start_delivery("r1", &lease, "d1").unwrap();
    store.mark_delivered("r1", &lease).unwrap();
    let rec = store.resolve("r1", &lease).unwrap();
    assert_eq!(rec.status, ManagedInputStatus::Resolved);
}
