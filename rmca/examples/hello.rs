//! Each rank prints its rank, the job size and the node it runs on.
//!
//! `rmca-run -n 4 target/release/examples/hello`

fn main() {
    let universe = match rmca::init() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("hello: rmca init failed: {e}");
            std::process::exit(1);
        }
    };
    let world = universe.world();
    let (node, node_index) = universe.node();
    let (pml, btls) = universe.components();
    println!(
        "hello from rank {} of {} on node {node} (#{node_index}), pml {pml}, btl {}",
        world.rank(),
        world.size(),
        btls.join(",")
    );
}
