//! The bundled shipping MCP server, built as a binary of the test package.

fn main() -> std::io::Result<()> {
    m3_shipping_server::run()
}
