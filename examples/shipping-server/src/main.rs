//! `shipping-server`: the bundled example MCP server of m3 (see the library's documentation).

fn main() -> std::io::Result<()> {
    m3_shipping_server::run()
}
