//! `gpumarket offers search '<query>'`: the compact query language
//! (`contracts::offer_query`), checked here before the request and parsed
//! again by the server.

use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::output::{number, table, text};
use super::{ApiArgs, CliError};

#[derive(Subcommand, Debug)]
pub enum OffersCommand {
    /// Search offers, e.g. 'gpu_name=RTX_4090 num_gpus>=2 dph<=0.6 country in [US,CA]'.
    Search {
        /// The query; an empty one lists every offer. See docs/cli.md.
        query: String,
        /// Page size (1 to 100).
        #[arg(long, default_value_t = 20)]
        first: i32,
        /// The `endCursor` of the previous page.
        #[arg(long)]
        after: Option<String>,
    },
}

pub async fn run(api: &ApiArgs, command: OffersCommand) -> Result<(), CliError> {
    match command {
        OffersCommand::Search {
            query,
            first,
            after,
        } => search(api, &query, first, after).await,
    }
}

const NODE_FIELDS: &str = "id gpuModel gpuCount gpusFree vramGib pricePerGpuHour \
    rentalPricePerGpuHour pricePerTflopHour pricePerHourGpuOnly pricePerHourAllIn reliability \
    verified country region datacenter cudaVersion downloadMbps";

const NO_OFFERS_FIELDS: &str = "liveOffers summary \
    constraints { constraint asked eliminated matchingWithout } \
    relaxations { constraint value matching description }";

async fn search(
    api: &ApiArgs,
    query: &str,
    first: i32,
    after: Option<String>,
) -> Result<(), CliError> {
    // A mistake is shown with a caret, and the server is not asked.
    if let Err(e) = contracts::offer_query::parse(query) {
        return Err(CliError::Usage(format!(
            "error: the query does not parse\n{}",
            contracts::offer_query::render(query, &e)
        )));
    }
    let mut params = vec!["$query: String", "$first: Int"];
    let mut arguments = vec!["query: $query", "first: $first"];
    let mut variables = Map::new();
    variables.insert("query".into(), json!(query));
    variables.insert("first".into(), json!(first));
    if let Some(after) = after {
        params.push("$after: String");
        arguments.push("after: $after");
        variables.insert("after".into(), json!(after));
    }
    let request = format!(
        "query({}) {{ offers({}) {{ nodes {{ {NODE_FIELDS} }} \
         pageInfo {{ hasNextPage endCursor }} noOffers {{ {NO_OFFERS_FIELDS} }} }} }}",
        params.join(", "),
        arguments.join(", ")
    );
    let data = api.client().run(&request, Value::Object(variables)).await?;
    let offers = &data["offers"];
    api.print(offers, || render_offers(offers));
    Ok(())
}

fn render_offers(offers: &Value) -> String {
    let nodes = offers["nodes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if nodes.is_empty() {
        return render_no_offers(&offers["noOffers"]);
    }
    let rows = nodes
        .iter()
        .map(|o| {
            let location = match (&o["country"], &o["region"]) {
                (country, Value::String(region)) if !region.is_empty() => {
                    format!("{}/{region}", text(country))
                }
                (country, _) => text(country),
            };
            vec![
                text(&o["id"]),
                text(&o["gpuModel"]),
                format!("{}/{}", text(&o["gpusFree"]), text(&o["gpuCount"])),
                text(&o["vramGib"]),
                number(&o["rentalPricePerGpuHour"]),
                number(&o["pricePerTflopHour"]),
                number(&o["pricePerHourAllIn"]),
                number(&o["reliability"]),
                text(&o["verified"]),
                location,
                text(&o["datacenter"]),
                text(&o["cudaVersion"]),
                text(&o["downloadMbps"]),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "ID",
            "GPU",
            "FREE",
            "VRAM GIB",
            "$/GPU-H",
            "$/TFLOP-H",
            "$/H ALL-IN",
            "RELIABILITY",
            "VERIFIED",
            "LOCATION",
            "DC",
            "CUDA",
            "DOWN MBPS",
        ],
        &[
            "FREE",
            "VRAM GIB",
            "$/GPU-H",
            "$/TFLOP-H",
            "$/H ALL-IN",
            "RELIABILITY",
            "DOWN MBPS",
        ],
        rows,
    );
    let page = &offers["pageInfo"];
    if page["hasNextPage"] == true {
        out.push_str(&format!(
            "\nMore offers: add --after {}",
            text(&page["endCursor"])
        ));
    }
    out
}

fn render_no_offers(no: &Value) -> String {
    if no.is_null() {
        return "No offers match.".into();
    }
    let mut out = format!(
        "No offers match ({} live offers in all).\n{}",
        text(&no["liveOffers"]),
        text(&no["summary"])
    );
    let list = |key: &str| no[key].as_array().cloned().unwrap_or_default();
    let constraints = list("constraints");
    if !constraints.is_empty() {
        let rows = constraints
            .iter()
            .map(|c| {
                vec![
                    text(&c["constraint"]),
                    text(&c["asked"]),
                    text(&c["eliminated"]),
                    text(&c["matchingWithout"]),
                ]
            })
            .collect();
        out.push_str("\n\nConstraints:\n");
        out.push_str(&table(
            &["CONSTRAINT", "ASKED", "RULES OUT", "MATCHING WITHOUT IT"],
            &["RULES OUT", "MATCHING WITHOUT IT"],
            rows,
        ));
    }
    let relaxations = list("relaxations");
    if relaxations.is_empty() {
        out.push_str("\n\nNo single change of one constraint finds an offer.");
    } else {
        let rows = relaxations
            .iter()
            .map(|r| {
                vec![
                    text(&r["constraint"]),
                    text(&r["value"]),
                    text(&r["matching"]),
                    text(&r["description"]),
                ]
            })
            .collect();
        out.push_str("\n\nTry relaxing:\n");
        out.push_str(&table(
            &["CONSTRAINT", "VALUE", "MATCHING", "DESCRIPTION"],
            &["MATCHING"],
            rows,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_page_shows_the_summary_and_the_relaxations() {
        let out = render_offers(&json!({
            "nodes": [],
            "pageInfo": { "hasNextPage": false, "endCursor": null },
            "noOffers": {
                "liveOffers": 6,
                "summary": "No RTX 4090 at or under 0.10.",
                "constraints": [{ "constraint": "max_price_per_gpu_hour", "asked": "price <= 0.10",
                                  "eliminated": 6, "matchingWithout": 2 }],
                "relaxations": [{ "constraint": "max_price_per_gpu_hour", "value": "0.29",
                                  "matching": 1, "description": "raise the price to 0.29" }],
            }
        }));
        assert!(out.contains("No RTX 4090 at or under 0.10."), "{out}");
        assert!(out.contains("Try relaxing:"), "{out}");
        assert!(out.contains("raise the price to 0.29"), "{out}");
        assert!(out.contains("MATCHING WITHOUT IT"), "{out}");
    }

    #[test]
    fn offers_are_a_table_with_trimmed_prices() {
        let out = render_offers(&json!({
            "nodes": [{ "id": "m1", "gpuModel": "RTX 4090", "gpuCount": 2, "gpusFree": 1,
                        "vramGib": 24, "rentalPricePerGpuHour": "0.450000000",
                        "pricePerTflopHour": "0.002", "pricePerHourAllIn": "0.45",
                        "reliability": null, "verified": true, "country": "US",
                        "region": "us-east", "datacenter": false, "cudaVersion": "12.4",
                        "downloadMbps": 1000 }],
            "pageInfo": { "hasNextPage": true, "endCursor": "abc" },
            "noOffers": null,
        }));
        assert!(out.contains("RTX 4090"), "{out}");
        assert!(out.contains(" 0.45 "), "{out}");
        assert!(out.contains("US/us-east"), "{out}");
        assert!(out.contains("--after abc"), "{out}");
    }
}
