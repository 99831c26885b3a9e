"""Word lists and sentence templates for :mod:`pipeline_dev.synth_filings`.

Everything here is plain data.  Templates use ``str.format_map`` slots such as
``{product}`` or ``{pct}``; a slot is filled from the filing's industry entry
first, then from :data:`GENERIC`, then from the numeric generators in
``synth_filings``.  Prose deliberately never contains the word "Item" or the
phrase "Total revenue", so section headers and the single revenue sentence stay
unambiguous for downstream parsers.
"""

from __future__ import annotations

Pool = tuple[str, ...]

# Company names are ROOT + MIDDLE + NOUN; the noun decides the industry.
ROOTS: Pool = (
    "Northwind", "Bluewater", "Cedarline", "Granite", "Silverline", "Ironwood", "Maplewood",
    "Aster", "Beacon", "Harborview", "Keystone", "Lakeshore", "Meridian", "Pinecrest",
    "Redstone", "Westbrook", "Eastgate", "Southport", "Clearwater", "Stonebridge", "Oakmont",
    "Falcon", "Osprey", "Heron", "Kestrel", "Sequoia", "Juniper", "Alder", "Willow",
    "Hawthorne", "Larkspur", "Sterling", "Cobalt", "Vantage", "Pioneer", "Frontier",
    "Horizon", "Zenith", "Apex", "Vertex", "Quantum", "Orion", "Polaris", "Atlas", "Titan",
    "Helix", "Nova", "Lumen", "Solstice", "Everest", "Sierra", "Cascade", "Tidewater",
    "Highland", "Prairie", "Canyon", "Coral", "Amber", "Crimson", "Indigo",
)  # fmt: skip
MIDDLES: Pool = (
    "", "Ridge", "Harbor", "Peak", "Valley", "Creek", "Point", "Bay", "Rock", "Field",
    "Bridge", "Gate", "Crest", "Forge", "Lake", "Park", "Hill", "Glen", "River", "Square",
)  # fmt: skip

# (suffix, state or country of incorporation)
SUFFIXES: tuple[tuple[str, str], ...] = (
    ("Inc.", "Delaware"), ("Inc.", "Nevada"), ("Corp.", "Delaware"),
    ("Corporation", "Delaware"), ("Holdings, Inc.", "Delaware"), ("Group, Inc.", "Maryland"),
    ("Co.", "Ohio"), ("plc", "England and Wales"), ("N.V.", "the Netherlands"),
    ("Ltd.", "Bermuda"), ("Ltd.", "the Cayman Islands"), ("S.A.", "Luxembourg"),
)  # fmt: skip

# (month day, EDGAR MMDD code, filing month for the signature date, year offset)
FISCAL_YEAR_ENDS: tuple[tuple[str, str, str, int], ...] = (
    ("December 31", "1231", "February", 1), ("December 31", "1231", "March", 1),
    ("June 30", "0630", "August", 0), ("September 30", "0930", "November", 0),
    ("March 31", "0331", "May", 0),
)  # fmt: skip

INDUSTRIES: tuple[dict[str, Pool], ...] = (
    {
        "noun": ("Robotics", "Automation", "Machines"),
        "desc": ("designs, manufactures and services industrial robots and factory automation systems",),
        "product": ("collaborative robot arms", "autonomous mobile robots", "machine vision modules",
                    "motion control software", "palletizing cells", "welding automation systems"),
        "customer": ("automotive manufacturers", "contract electronics manufacturers",
                     "third-party logistics providers", "food and beverage processors", "aerospace suppliers"),
        "input": ("servo motors", "precision gearboxes", "embedded controllers", "machined aluminum castings",
                  "lithium-ion battery packs"),
        "competitor": ("large diversified industrial conglomerates", "specialized regional integrators",
                       "low-cost manufacturers in Asia"),
        "regulator": ("the Occupational Safety and Health Administration", "European machinery safety authorities",
                      "export control agencies"),
        "segment": ("Industrial Systems", "Mobile Robotics", "Services and Software"),
        "tech": ("motion planning", "computer vision", "force sensing", "fleet orchestration software"),
    },
    {
        "noun": ("Software", "Analytics", "Cloud"),
        "desc": ("provides cloud-based software that helps organizations manage data, workflows and analytics",),
        "product": ("subscription analytics platforms", "workflow automation suites", "data integration services",
                    "security monitoring tools", "developer APIs", "professional services"),
        "customer": ("mid-market enterprises", "financial institutions", "healthcare systems",
                     "public sector agencies", "software developers"),
        "input": ("third-party cloud hosting capacity", "data center services", "open source components",
                  "licensed data feeds", "payment processing services"),
        "competitor": ("large horizontal software vendors", "venture-backed start-ups",
                       "internal information technology departments"),
        "regulator": ("data protection authorities", "the Federal Trade Commission", "state privacy regulators"),
        "segment": ("Subscription", "Professional Services", "Platform"),
        "tech": ("machine learning", "data pipelines", "identity management", "usage-based pricing"),
    },
    {
        "noun": ("Therapeutics", "Biosciences", "Pharmaceuticals"),
        "desc": ("develops and commercializes therapies for oncology, immunology and rare diseases",),
        "product": ("late-stage antibody candidates", "small molecule inhibitors", "gene therapy programs",
                    "commercial specialty medicines", "companion diagnostics", "biosimilar products"),
        "customer": ("specialty pharmacies", "hospital systems", "wholesale distributors",
                     "government health programs", "academic medical centers"),
        "input": ("active pharmaceutical ingredients", "contract manufacturing capacity", "cell culture media",
                  "clinical trial services", "single-use bioreactor components"),
        "competitor": ("large multinational pharmaceutical companies", "emerging biotechnology companies",
                       "generic drug manufacturers"),
        "regulator": ("the Food and Drug Administration", "the European Medicines Agency",
                      "the Centers for Medicare and Medicaid Services"),
        "segment": ("Commercial Products", "Research and Development", "Collaborations"),
        "tech": ("antibody engineering", "viral vector manufacturing", "biomarker discovery", "protein design"),
    },
    {
        "noun": ("Semiconductor", "Microsystems", "Photonics"),
        "desc": ("designs and sells analog, mixed-signal and optical semiconductor components",),
        "product": ("power management integrated circuits", "optical transceivers", "sensor interface chips",
                    "radio frequency front-end modules", "microcontrollers", "silicon photonics engines"),
        "customer": ("original equipment manufacturers", "data center operators", "automotive tier one suppliers",
                     "industrial equipment makers", "consumer electronics brands"),
        "input": ("silicon wafers", "foundry capacity", "substrate materials", "assembly and test services",
                  "rare earth elements"),
        "competitor": ("larger integrated device manufacturers", "fabless design houses",
                       "state-supported domestic champions"),
        "regulator": ("the Bureau of Industry and Security", "customs authorities", "environmental agencies"),
        "segment": ("Data Center", "Automotive and Industrial", "Consumer"),
        "tech": ("process node migration", "advanced packaging", "low-power design", "optical interconnects"),
    },
    {
        "noun": ("Energy", "Power", "Renewables"),
        "desc": ("develops, owns and operates utility-scale solar, wind and battery storage projects",),
        "product": ("long-term power purchase agreements", "battery storage services", "renewable energy credits",
                    "community solar subscriptions", "grid balancing services", "engineering services"),
        "customer": ("investor-owned utilities", "municipal power agencies", "large commercial offtakers",
                     "independent system operators", "data center developers"),
        "input": ("photovoltaic modules", "wind turbine components", "transformers", "battery cells",
                  "interconnection capacity"),
        "competitor": ("independent power producers", "regulated utilities", "infrastructure funds"),
        "regulator": ("the Federal Energy Regulatory Commission", "state public utility commissions",
                      "the Environmental Protection Agency"),
        "segment": ("Solar Generation", "Wind Generation", "Storage and Services"),
        "tech": ("bifacial modules", "single-axis trackers", "grid-forming inverters", "energy forecasting"),
    },
    {
        "noun": ("Brands", "Outfitters", "Markets"),
        "desc": ("operates specialty retail stores and an e-commerce business selling apparel and home goods",),
        "product": ("private label apparel", "outdoor equipment", "home furnishings", "footwear",
                    "seasonal merchandise", "loyalty program memberships"),
        "customer": ("value-conscious households", "outdoor enthusiasts", "loyalty program members",
                     "online shoppers", "small business buyers"),
        "input": ("finished goods from overseas vendors", "cotton and synthetic fabrics", "ocean freight capacity",
                  "distribution center labor", "packaging materials"),
        "competitor": ("national department stores", "online marketplaces", "off-price retailers"),
        "regulator": ("the Consumer Product Safety Commission", "customs authorities", "state labor agencies"),
        "segment": ("Stores", "Digital", "Wholesale"),
        "tech": ("omnichannel fulfillment", "demand forecasting", "mobile checkout", "personalized marketing"),
    },
    {
        "noun": ("Logistics", "Freight", "Transport"),
        "desc": ("provides truckload, intermodal and contract warehousing services across North America",),
        "product": ("dedicated truckload services", "intermodal transportation", "freight brokerage",
                    "contract warehousing", "last-mile delivery", "supply chain consulting"),
        "customer": ("consumer packaged goods companies", "big-box retailers", "industrial manufacturers",
                     "e-commerce merchants", "automotive parts suppliers"),
        "input": ("diesel fuel", "tractors and trailers", "qualified drivers", "warehouse space",
                  "rail capacity"),
        "competitor": ("asset-based carriers", "non-asset freight brokers", "private fleets"),
        "regulator": ("the Department of Transportation", "the Federal Motor Carrier Safety Administration",
                      "state environmental regulators"),
        "segment": ("Truckload", "Intermodal", "Logistics Solutions"),
        "tech": ("route optimization", "electronic logging devices", "telematics", "warehouse robotics"),
    },
    {
        "noun": ("Financial", "Capital", "Bancorp"),
        "desc": ("is a financial holding company offering commercial banking, lending and wealth management services",),
        "product": ("commercial real estate loans", "treasury management services", "residential mortgages",
                    "wealth advisory services", "small business loans", "deposit products"),
        "customer": ("small and mid-sized businesses", "high net worth individuals", "municipalities",
                     "retail depositors", "commercial real estate investors"),
        "input": ("core deposits", "wholesale funding", "core processing systems", "credit bureau data",
                  "third-party servicers"),
        "competitor": ("large national banks", "credit unions", "financial technology lenders"),
        "regulator": ("the Federal Reserve", "the Federal Deposit Insurance Corporation",
                      "the Consumer Financial Protection Bureau"),
        "segment": ("Commercial Banking", "Consumer Banking", "Wealth Management"),
        "tech": ("digital account opening", "fraud detection models", "real-time payments", "online banking"),
    },
    {
        "noun": ("Medical", "Diagnostics", "Surgical"),
        "desc": ("develops, manufactures and markets medical devices and diagnostic systems",),
        "product": ("minimally invasive surgical instruments", "molecular diagnostic assays",
                    "patient monitoring systems", "orthopedic implants", "single-use consumables",
                    "imaging software"),
        "customer": ("hospitals", "ambulatory surgery centers", "reference laboratories", "group purchasing organizations",
                     "physician practices"),
        "input": ("medical-grade polymers", "precision machined components", "electronic assemblies",
                  "sterilization services", "reagents"),
        "competitor": ("large diversified medical technology companies", "niche device makers",
                       "lower-cost international manufacturers"),
        "regulator": ("the Food and Drug Administration", "European notified bodies",
                      "the Centers for Medicare and Medicaid Services"),
        "segment": ("Surgical", "Diagnostics", "Monitoring"),
        "tech": ("robotic-assisted surgery", "point-of-care testing", "remote monitoring", "image analysis"),
    },
    {
        "noun": ("Foods", "Beverages", "Consumer Products"),
        "desc": ("manufactures and markets branded packaged foods, beverages and household products",),
        "product": ("snack foods", "ready-to-drink beverages", "frozen meals", "household cleaning products",
                    "personal care products", "private label goods"),
        "customer": ("grocery chains", "mass merchandisers", "club stores", "convenience stores",
                     "foodservice distributors"),
        "input": ("agricultural commodities", "aluminum cans", "corrugated packaging", "resin",
                  "co-manufacturing capacity"),
        "competitor": ("large multinational consumer goods companies", "regional brands",
                       "retailer private label programs"),
        "regulator": ("the Food and Drug Administration", "the Department of Agriculture",
                      "state consumer protection agencies"),
        "segment": ("North America Retail", "International", "Foodservice"),
        "tech": ("automated packaging lines", "shelf-life extension", "e-commerce analytics", "recyclable packaging"),
    },
    {
        "noun": ("Materials", "Chemicals", "Metals"),
        "desc": ("produces specialty chemicals, engineered materials and metal products for industrial markets",),
        "product": ("specialty coatings", "engineered polymers", "aluminum extrusions", "catalysts",
                    "industrial adhesives", "high-purity gases"),
        "customer": ("construction contractors", "automotive manufacturers", "packaging converters",
                     "electronics manufacturers", "oil and gas operators"),
        "input": ("natural gas", "propylene", "bauxite", "electricity", "rail car capacity"),
        "competitor": ("integrated global chemical producers", "regional specialty producers",
                       "commodity importers"),
        "regulator": ("the Environmental Protection Agency", "European chemicals regulators",
                      "state environmental agencies"),
        "segment": ("Performance Materials", "Industrial Chemicals", "Metal Products"),
        "tech": ("process intensification", "low-carbon production", "advanced coatings", "recycling technology"),
    },
    {
        "noun": ("Networks", "Communications", "Wireless"),
        "desc": ("provides broadband, wireless and managed network services to residential and business customers",),
        "product": ("fiber broadband service", "fixed wireless access", "managed network services",
                    "business voice services", "data center interconnection", "mobile virtual network services"),
        "customer": ("residential subscribers", "enterprise customers", "wholesale carriers",
                     "government agencies", "rural communities"),
        "input": ("fiber optic cable", "network equipment", "spectrum licenses", "pole attachment rights",
                  "content licenses"),
        "competitor": ("incumbent cable operators", "national wireless carriers", "satellite broadband providers"),
        "regulator": ("the Federal Communications Commission", "state public utility commissions",
                      "municipal franchising authorities"),
        "segment": ("Residential", "Business Services", "Wholesale"),
        "tech": ("fiber-to-the-home", "software-defined networking", "fixed wireless", "network automation"),
    },
)  # fmt: skip

GENERIC: dict[str, Pool] = {
    "region": ("North America", "Europe", "the Asia-Pacific region", "Latin America", "the Middle East",
               "Japan", "the United Kingdom", "Germany", "Canada", "India"),
    "channel": ("our direct sales force", "value-added resellers", "distribution partners",
                "online marketplaces", "strategic alliance partners", "independent sales representatives"),
    "city": ("Austin, Texas", "Columbus, Ohio", "Raleigh, North Carolina", "Denver, Colorado",
             "San Jose, California", "Boston, Massachusetts", "Minneapolis, Minnesota", "Atlanta, Georgia",
             "Phoenix, Arizona", "Pittsburgh, Pennsylvania", "Nashville, Tennessee", "Salt Lake City, Utah"),
    "first": ("Jane", "Michael", "Priya", "David", "Maria", "Robert", "Aisha", "Thomas", "Elena", "James",
              "Grace", "Daniel", "Sofia", "William", "Hannah", "Carlos"),
    "last": ("Whitfield", "Okafor", "Lindqvist", "Brennan", "Castillo", "Nakamura", "Hollis", "Ramirez",
             "Patel", "Sorensen", "Adeyemi", "Carver", "Delgado", "Moreau", "Fitzgerald", "Kowalski"),
    "auditor": ("Harlan & Whitcomb LLP", "Greystone Audit LLP", "Marlow Pierce LLP", "Ashford Keane LLP"),
    "standard": ("ASU 2023-07, Segment Reporting", "ASU 2023-09, Income Taxes", "ASU 2024-03, Expense "
                 "Disaggregation Disclosures", "ASU 2023-05, Joint Venture Formations"),
}  # fmt: skip

# Risk factors: (title without the final period, specific body sentences).
RISKS: tuple[tuple[str, Pool], ...] = (
    ("Supply chain concentration", (
        "We rely on a limited number of suppliers for {input}, and some of these suppliers are sole sources.",
        "A disruption at any of these suppliers may delay shipments of {product} for several quarters.",
        "Qualifying alternative sources of {input} can take {years} months or longer.")),
    ("Customer concentration", (
        "A significant portion of our sales is derived from a small number of {customer}.",
        "Our largest customer accounted for approximately {pct}% of net sales in fiscal {prior_fy}.",
        "The loss of, or a significant reduction in orders from, any major customer may be difficult to replace.")),
    ("Intense competition", (
        "We compete with {competitor}, many of which have greater financial and technical resources.",
        "Competitors may introduce lower-priced alternatives to our {product}.",
        "Pricing pressure in {region} may require us to reduce prices or increase promotional spending.")),
    ("Cybersecurity incidents", (
        "Our systems and those of our vendors are subject to ransomware, phishing and other attacks.",
        "A breach may expose confidential information about {customer} and our employees.",
        "Remediation costs and regulatory inquiries following an incident may be substantial.")),
    ("Dependence on key personnel", (
        "Our success depends on the continued service of our executive officers and engineering leaders.",
        "Competition for talent with expertise in {tech} is intense.",
        "We may be unable to attract or retain qualified personnel on acceptable terms.")),
    ("Macroeconomic uncertainty", (
        "Demand for {product} is sensitive to general economic conditions in {region}.",
        "A recession or slowdown may cause {customer} to delay or cancel purchases.",
        "Tighter credit conditions may also affect the ability of our customers to pay amounts owed to us.")),
    ("Foreign currency exchange fluctuations", (
        "Approximately {pct}% of our net sales are denominated in currencies other than the U.S. dollar.",
        "A stronger dollar reduces the reported value of sales generated in {region}.",
        "Our hedging program may not fully offset the effect of exchange rate movements.")),
    ("Changes in tax laws", (
        "We are subject to income taxes in the United States and numerous foreign jurisdictions.",
        "Changes in tax rates, the adoption of a global minimum tax or the outcome of audits may increase our effective tax rate.",
        "Tax authorities may disagree with our transfer pricing positions.")),
    ("Regulatory compliance costs", (
        "Our operations are subject to oversight by {regulator}.",
        "New or changed regulations may require us to modify {product} or our business practices.",
        "Failure to comply may result in fines, penalties or restrictions on our operations.")),
    ("Intellectual property protection", (
        "We rely on patents, trade secrets and contractual protections to safeguard our {tech} capabilities.",
        "Third parties may challenge, invalidate or circumvent our intellectual property rights.",
        "Litigation to enforce our rights may be costly and divert management attention.")),
    ("Product defects and warranty claims", (
        "Our {product} are complex and may contain defects that are discovered only after shipment.",
        "Defects may lead to recalls, warranty claims and damage to our reputation with {customer}.",
        "Our warranty reserves may not be sufficient to cover actual claims.")),
    ("Indebtedness and covenant compliance", (
        "As of the end of fiscal {fy}, we had approximately {money} of outstanding indebtedness.",
        "Our credit agreement contains financial covenants that may restrict our ability to pursue acquisitions.",
        "A breach of these covenants may result in acceleration of amounts outstanding.")),
    ("Acquisition integration", (
        "We have acquired and may continue to acquire businesses that complement our {product}.",
        "Integrating acquired operations, systems and personnel may take longer and cost more than expected.",
        "Acquired businesses may not achieve the synergies we anticipated.")),
    ("International operations", (
        "We conduct significant operations in {region} and {region}.",
        "Political instability, tariffs and differing legal systems may increase the cost of doing business abroad.",
        "Compliance with anti-corruption laws across many jurisdictions is complex.")),
    ("Climate-related disruptions", (
        "Severe weather events may damage our facilities or disrupt the supply of {input}.",
        "Physical climate risks in {region} may increase insurance and operating costs.",
        "Transition to a lower-carbon economy may change demand for {product}.")),
    ("Inflation and input cost volatility", (
        "Prices for {input} have been volatile and may increase further.",
        "We may not be able to pass higher costs through to {customer} in a timely manner.",
        "Wage inflation may also increase our operating expenses.")),
    ("Labor availability", (
        "Our operations depend on a skilled workforce, and labor markets in {region} remain tight.",
        "Work stoppages or union organizing efforts may disrupt production.",
        "Higher turnover may increase training costs and reduce productivity.")),
    ("Information technology system failures", (
        "We depend on enterprise resource planning and other systems to process orders and report results.",
        "A failed system implementation or prolonged outage may disrupt our operations.",
        "Our disaster recovery plans may not prevent data loss.")),
    ("Litigation exposure", (
        "We are party to commercial, employment and product liability claims arising in the ordinary course.",
        "An adverse outcome in one or more matters may require us to pay significant damages.",
        "Insurance may not cover all of the costs of defending these claims.")),
    ("Volatility of our stock price", (
        "The market price of our common stock has fluctuated and may continue to fluctuate significantly.",
        "Quarterly results that fall short of analyst expectations may cause the price to decline.",
        "Securities class action litigation often follows periods of volatility.")),
    ("Data privacy regulation", (
        "We collect and process personal information about {customer} and employees.",
        "Privacy laws in {region} impose strict requirements and significant penalties.",
        "Compliance with evolving privacy rules may require changes to our systems and practices.")),
    ("Dependence on new product introductions", (
        "Our future growth depends on the timely introduction of new {product}.",
        "Development programs in {tech} may be delayed or may not achieve market acceptance.",
        "We may invest significant resources in products that do not generate an adequate return.")),
    ("Seasonality of demand", (
        "Our sales are typically higher in the final quarter of the fiscal year.",
        "Unfavorable weather or economic conditions during peak periods may reduce annual results.",
        "Seasonal patterns make it difficult to predict quarterly results.")),
    ("Interest rate sensitivity", (
        "Borrowings under our revolving credit facility bear interest at variable rates.",
        "Rising rates may increase our interest expense and reduce cash available for investment.",
        "Higher rates may also reduce demand from {customer} that finance their purchases.")),
    ("Goodwill impairment", (
        "We carry significant goodwill and intangible assets from prior acquisitions.",
        "A decline in the performance of the {segment} reporting unit may require an impairment charge.",
        "Impairment charges may be material to our results in the period recorded.")),
    ("Reliance on third-party distributors", (
        "We sell a portion of our products through {channel}.",
        "Distributors may carry competing products or reduce inventory levels without notice.",
        "Financial difficulties at a major distributor may affect collections.")),
    ("Export controls and trade restrictions", (
        "Certain of our products are subject to export controls administered by the U.S. government.",
        "New restrictions may limit our ability to sell {product} to customers in {region}.",
        "Retaliatory tariffs may increase the cost of {input}.")),
    ("Pandemics and public health events", (
        "A pandemic may disrupt our workforce, suppliers and customers.",
        "Government restrictions may require temporary closure of facilities.",
        "The duration and severity of any future outbreak is inherently uncertain.")),
    ("Internal control over financial reporting", (
        "We must maintain effective internal control over financial reporting.",
        "We may identify material weaknesses in the future, particularly in connection with acquisitions.",
        "A material weakness may cause investors to lose confidence in our reported results.")),
    ("Artificial intelligence adoption", (
        "We are incorporating artificial intelligence into our products and internal processes.",
        "These technologies may produce inaccurate outputs or raise novel legal and ethical issues.",
        "Competitors may adopt these tools faster or more effectively than we do.")),
    ("Insurance coverage limitations", (
        "We maintain insurance at levels we believe are customary for our industry.",
        "Certain losses may be uninsurable or exceed our policy limits.",
        "Premiums may increase significantly following industry-wide losses.")),
    ("Environmental liabilities", (
        "Our facilities are subject to environmental laws governing emissions, waste and remediation.",
        "We may be liable for contamination at sites we currently or formerly operated.",
        "Environmental requirements enforced by {regulator} may become more stringent.")),
    ("Reputational harm", (
        "Our brand is important to our relationships with {customer}.",
        "Negative publicity, whether or not accurate, may spread rapidly through social media.",
        "Damage to our reputation may be difficult and costly to repair.")),
    ("Capital allocation and liquidity", (
        "We may require additional capital to fund growth in {segment}.",
        "Financing may not be available on acceptable terms, particularly during periods of market stress.",
        "Share repurchases and dividends reduce the cash available for other purposes.")),
    ("Anti-takeover provisions", (
        "Provisions in our charter documents and applicable law may discourage a change in control.",
        "These provisions may limit the price that investors are willing to pay for our shares.",
        "Our board of directors may issue preferred stock without stockholder approval.")),
    ("Evolving sustainability expectations", (
        "Investors, customers and regulators increasingly focus on environmental and social matters.",
        "New climate disclosure rules may increase our compliance costs.",
        "Failure to meet stated sustainability goals may harm our reputation.")),
)  # fmt: skip

RISK_CLOSERS: Pool = (
    "Any of these events could adversely affect our business, financial condition and results of operations.",
    "If this risk materializes, it could adversely affect our operating results and cash flows.",
    "These factors may reduce our margins and could adversely affect our financial performance.",
    "As a result, our results of operations may fluctuate and the price of our common stock may decline.",
    "This risk could adversely affect our ability to achieve our growth objectives.",
    "We cannot assure you that we will successfully manage this risk, and our business may suffer.",
)

BUSINESS_BASE: dict[str, Pool] = {
    "Products and Services": (
        "Our portfolio includes {product}, {product} and related support offerings.",
        "We continue to expand our {product} line with new configurations tailored to {customer}.",
        "Sales of {product} represented approximately {pct}% of net sales in fiscal {fy}.",
        "Our offerings are differentiated by our expertise in {tech} and {tech}.",
        "We also provide installation, training and maintenance services under multi-year agreements.",
    ),
    "Customers": (
        "We serve {customer}, {customer} and {customer} in more than {count} countries.",
        "No single customer accounted for more than {pct}% of net sales in fiscal {fy}.",
        "Our customer relationships are typically governed by master agreements with terms of {years} years.",
        "We reach customers through {channel} and {channel}.",
    ),
    "Competition": (
        "The markets in which we operate are highly competitive and fragmented.",
        "We compete primarily with {competitor} and {competitor}.",
        "Principal competitive factors include product performance, price, reliability and customer service.",
        "We believe our investments in {tech} position us favorably against competitors in {region}.",
    ),
    "Human Capital": (
        "Our culture emphasizes safety, accountability and continuous improvement.",
        "We offer competitive compensation, retirement plans and tuition assistance to attract talent.",
        "Voluntary turnover was approximately {pct}% in fiscal {fy}.",
        "We conduct an annual engagement survey and use the results to guide management priorities.",
    ),
}

BUSINESS_PAD: dict[str, Pool] = {
    "Sales and Marketing": (
        "We market our products through {channel}, supported by application engineers in {region}.",
        "Our marketing programs include trade shows, digital campaigns and customer advisory councils.",
        "We expanded our sales coverage in {region} during fiscal {fy} by adding {count} account managers.",
        "Contracts with {customer} often include volume commitments and annual price adjustments.",
        "We track pipeline conversion and customer retention as key indicators of sales effectiveness.",
        "Channel partners receive training, marketing development funds and access to demonstration equipment.",
        "Our pricing strategy reflects the total cost of ownership of {product} rather than initial price alone.",
    ),
    "Research and Development": (
        "Our research and development organization focuses on {tech} and {tech}.",
        "We maintain development centers in {city} and {region}.",
        "Research and development expense was approximately {pct}% of net sales in fiscal {fy}.",
        "We collaborate with universities and {customer} to validate new designs before launch.",
        "Our product roadmap includes next-generation {product} expected to be introduced in fiscal {next_fy}.",
        "We use a stage-gate process to allocate development spending among competing programs.",
        "Engineers working on {tech} represented approximately {pct}% of our technical staff.",
    ),
    "Manufacturing and Supply Chain": (
        "We source {input} and {input} from suppliers located in {region} and {region}.",
        "Our principal production facility is located near {city}.",
        "We maintain safety stock of critical {input} to mitigate supply disruptions.",
        "We qualified {count} additional suppliers during fiscal {fy} to diversify our supply base.",
        "Our operations team applies lean manufacturing principles to reduce cycle times and scrap.",
        "Freight and logistics costs are managed through long-term agreements with carriers.",
        "We periodically audit suppliers for quality, labor practices and environmental compliance.",
    ),
    "Intellectual Property": (
        "We hold approximately {count} issued patents and have additional applications pending.",
        "Our patents relating to {tech} expire at various dates over the next {years} years.",
        "We also rely on trade secrets, confidentiality agreements and invention assignment agreements.",
        "We license certain technologies from third parties under agreements that require royalty payments.",
        "We register our principal trademarks in the United States and in key markets in {region}.",
        "We actively monitor the market for potential infringement of our intellectual property.",
    ),
    "Government Regulation": (
        "Our business is subject to regulation by {regulator} and {regulator}.",
        "We maintain compliance programs covering anti-corruption, export controls and data privacy.",
        "Regulatory requirements in {region} continue to evolve and may affect the design of {product}.",
        "We have not incurred material costs to comply with environmental laws in recent years.",
        "Our compliance function reports regularly to the audit committee of our board of directors.",
        "We expect to spend additional resources in fiscal {next_fy} to address new reporting requirements.",
    ),
    "Seasonality and Backlog": (
        "Our business experiences moderate seasonality, with stronger demand in the second half of the fiscal year.",
        "Orders from {customer} tend to increase ahead of their annual budget cycles.",
        "Backlog at the end of fiscal {fy} increased approximately {pct}% from the prior year.",
        "We expect to fulfill the majority of our backlog within the next twelve months.",
        "Backlog is not necessarily indicative of future results because orders may be rescheduled.",
    ),
    "Sustainability": (
        "We have set a goal to reduce our Scope 1 and Scope 2 greenhouse gas emissions by {pct}% by {goal_year}.",
        "During fiscal {fy}, we increased the share of renewable electricity used at our facilities.",
        "Our sustainability committee oversees environmental, social and governance initiatives.",
        "We work with suppliers of {input} to improve traceability and reduce waste.",
        "We publish an annual sustainability report aligned with widely used reporting frameworks.",
    ),
    "Information Technology and Cybersecurity": (
        "Our cybersecurity program is based on recognized industry frameworks and is overseen by our board.",
        "We conduct penetration testing and tabletop exercises at least annually.",
        "Our chief information security officer has more than {years} years of experience.",
        "We require vendors with access to sensitive data to meet contractual security standards.",
        "We did not identify any cybersecurity incidents that materially affected us during fiscal {fy}.",
    ),
}

MDNA_PRE: dict[str, Pool] = {
    "Key Trends and Uncertainties": (
        "Demand from {customer} remained resilient, although order patterns varied by region.",
        "We continued to see elevated costs for {input} during the first half of fiscal {fy}.",
        "Pricing actions implemented in the prior year contributed to margin stability.",
        "We expect investment in {tech} to remain a priority in fiscal {next_fy}.",
        "Supply chain conditions improved, allowing us to reduce lead times for {product}.",
        "Our outlook assumes stable macroeconomic conditions in {region}.",
    ),
    "Macroeconomic Conditions": (
        "Higher interest rates affected capital spending decisions by some {customer}.",
        "Foreign currency movements reduced reported results in {region} compared with the prior year.",
        "Inflation moderated during fiscal {fy}, although wage pressure persisted.",
        "We continue to monitor trade policy developments that may affect the cost of {input}.",
        "Geopolitical events created uncertainty in certain markets in {region}.",
    ),
}

MDNA_POST: dict[str, Pool] = {
    "Segment Information": (
        "The {main_segment} segment represented approximately {main_share}% of consolidated net sales.",
        "Operating margin in the {segment} segment changed by {bps} basis points from the prior year.",
        "Growth in the {segment} segment reflected higher demand for {product}.",
        "Segment results exclude unallocated corporate costs, amortization and restructuring charges.",
        "Our chief operating decision maker evaluates segments based on adjusted operating income.",
        "The {segment} segment benefited from new contracts with {customer}.",
    ),
    "Liquidity and Capital Resources": (
        "Our principal sources of liquidity are cash on hand, cash from operations and our revolving credit facility.",
        "As of the end of fiscal {fy}, we had cash and cash equivalents of {money}.",
        "Availability under our revolving credit facility was {money} at the end of the year.",
        "We believe our existing resources are sufficient to meet our needs for at least the next twelve months.",
        "Capital expenditures were {money} in fiscal {fy}, primarily for capacity expansion and systems.",
        "We repurchased approximately {count} thousand shares of common stock during the year.",
        "We were in compliance with all covenants under our credit agreement.",
    ),
    "Cash Flows": (
        "Net cash provided by operating activities was {money} in fiscal {fy}.",
        "Net cash used in investing activities was {money}, reflecting capital expenditures and acquisitions.",
        "Net cash used in financing activities was {money}, primarily for debt repayment and share repurchases.",
        "Changes in working capital reflected higher inventory of {input} ahead of expected demand.",
        "Days sales outstanding improved by {count} days compared with the prior year.",
    ),
    "Critical Accounting Estimates": (
        "The preparation of financial statements requires management to make estimates and assumptions.",
        "We evaluate goodwill for impairment annually and whenever events indicate a potential impairment.",
        "Inventory reserves are based on historical usage, forecasted demand and product life cycles.",
        "Estimates of variable consideration reflect historical experience with returns and rebates.",
        "Income tax positions require judgment regarding the realizability of deferred tax assets.",
        "A change of {pct}% in key assumptions would not have resulted in an impairment of any reporting unit.",
    ),
    "Contractual Obligations": (
        "Our contractual obligations consist primarily of debt, operating leases and purchase commitments.",
        "Purchase obligations for {input} totaled approximately {money} at year end.",
        "Operating lease payments are due over a weighted-average remaining term of {years} years.",
        "We have no off-balance sheet arrangements that are reasonably likely to have a material effect.",
    ),
    "Recent Accounting Pronouncements": (
        "In recent periods, the Financial Accounting Standards Board issued {standard}.",
        "We are evaluating the effect of {standard} on our disclosures.",
        "We do not expect recently issued accounting standards to have a material effect on our results.",
        "We adopted {standard} in fiscal {fy} with no material effect on our financial position.",
    ),
}

NOTES_PAD: dict[str, Pool] = {
    "Revenue Recognition": (
        "We recognize revenue when control of promised goods or services transfers to customers.",
        "Contracts with {customer} may include multiple performance obligations.",
        "Standalone selling prices are determined based on observable prices in similar transactions.",
        "Payment terms generally range from {count} to {count2} days and contain no significant financing component.",
        "Deferred amounts relate primarily to service contracts billed in advance of performance.",
    ),
    "Leases": (
        "We lease office, manufacturing and warehouse facilities under operating leases.",
        "Our leases have remaining terms of up to {years} years, some of which include renewal options.",
        "The weighted-average discount rate for operating leases was {rate}% at year end.",
        "Operating lease cost was {money} in fiscal {fy}.",
        "We do not separate lease and non-lease components for real estate leases.",
    ),
    "Debt": (
        "Our credit agreement provides for a revolving facility and a term loan maturing in {goal_year}.",
        "Borrowings bear interest at a benchmark rate plus a margin of {bps} basis points.",
        "The carrying value of long-term debt approximated fair value at year end.",
        "Unamortized debt issuance costs were {money} at the end of fiscal {fy}.",
        "The agreement requires us to maintain a maximum leverage ratio and a minimum interest coverage ratio.",
    ),
    "Income Taxes": (
        "The effective tax rate differs from the statutory rate due to state taxes, credits and foreign operations.",
        "We maintain a valuation allowance against certain foreign net operating loss carryforwards.",
        "Unrecognized tax benefits were {money} at year end, substantially all of which would affect the rate.",
        "Tax years after fiscal {audit_year} remain open to examination by major taxing authorities.",
        "We recognize interest and penalties related to income tax matters in income tax expense.",
    ),
    "Stock-Based Compensation": (
        "We grant restricted stock units and performance share units under our equity incentive plan.",
        "Restricted stock units generally vest ratably over {n_small} years.",
        "Stock-based compensation expense was {money} in fiscal {fy}.",
        "The fair value of performance share units is estimated using a Monte Carlo simulation.",
        "Unrecognized compensation cost is expected to be recognized over a weighted-average period of {n_small} years.",
    ),
    "Commitments and Contingencies": (
        "We are involved in legal proceedings arising in the ordinary course of business.",
        "We accrue for contingencies when a loss is probable and the amount can be reasonably estimated.",
        "Management does not believe the outcome of pending matters will have a material adverse effect.",
        "We provide standard warranties on {product} for periods of up to {n_small} years.",
        "Purchase commitments for {input} extend through fiscal {next_fy}.",
    ),
    "Fair Value Measurements": (
        "We measure certain financial assets and liabilities at fair value on a recurring basis.",
        "Money market funds are classified within Level 1 of the fair value hierarchy.",
        "Foreign currency forward contracts are classified within Level 2.",
        "Contingent consideration related to acquisitions is classified within Level 3.",
        "There were no transfers between levels of the fair value hierarchy during fiscal {fy}.",
    ),
    "Goodwill and Intangible Assets": (
        "Goodwill is allocated to the {segment} reporting unit and our other reporting units.",
        "Intangible assets consist primarily of customer relationships, developed technology and trade names.",
        "Amortization expense was {money} in fiscal {fy}.",
        "Intangible assets are amortized on a straight-line basis over useful lives of {n_small} to {years} years.",
        "We completed our annual goodwill impairment test and concluded that no impairment existed.",
    ),
}

REVENUE_DRIVERS_UP: Pool = (
    "The increase was primarily driven by higher volumes of {product} and continued demand from {customer}.",
    "Growth reflected new customer wins in {region} and pricing actions implemented during the year.",
    "The {segment} segment contributed the majority of the growth.",
    "Favorable product mix toward {product} also contributed to the increase.",
)
REVENUE_DRIVERS_DOWN: Pool = (
    "The decrease was primarily attributable to lower demand from {customer} and reduced shipments of {product}.",
    "Softer conditions in {region} and unfavorable currency movements also contributed to the decline.",
    "The {segment} segment accounted for most of the decline.",
    "Inventory reductions by {customer} weighed on order volumes during the second half of the year.",
)

CONNECTIVES: Pool = (
    "In addition,", "Additionally,", "In particular,", "Furthermore,", "Moreover,", "Importantly,",
    "Consistent with prior years,", "As in prior periods,", "Across our business,",
)  # fmt: skip

# The document, block by block (blocks are joined by blank lines).  "@name" is a slot the
# generator fills with zero or more blocks, "~..." is prose to fill and wrap, anything else
# is filled (fixed per-filing values only) and kept as is.
SKELETON: Pool = (
    "UNITED STATES SECURITIES AND EXCHANGE COMMISSION\nWashington, D.C. 20549",
    "FORM 10-K",
    "ANNUAL REPORT PURSUANT TO SECTION 13 OR 15(d) OF THE SECURITIES EXCHANGE ACT OF 1934\n"
    "For the fiscal year ended {fye}, {fy}",
    "COMPANY CONFORMED NAME: {company}\nCENTRAL INDEX KEY: {cik}\nSTATE OF INCORPORATION: {state}\n"
    "FISCAL YEAR END: {fye_code}",
    "PART I",
    "Item 1. Business",
    "Overview",
    "~{company} {desc}. We were incorporated in {state} in {founded} and are headquartered in {hq}. "
    "Our principal offerings include {offerings}. We operate through {segments} reportable segments. "
    'In this report, "we", "us" and "our" refer to {name} and its consolidated subsidiaries.',
    "@business",
    "@pad_item1",
    "Item 1A. Risk Factors",
    "@risks",
    "Item 1B. Unresolved Staff Comments",
    "None.",
    "Item 1C. Cybersecurity",
    "@cyber",
    "Item 2. Properties",
    "~Our corporate headquarters is located in {hq}, where we lease approximately {sqft} square feet. "
    "We also operate facilities in {region} and {region}. "
    "We believe our facilities are adequate for our current needs.",
    "Item 3. Legal Proceedings",
    "~We are involved in legal proceedings arising in the ordinary course of business. We accrue for "
    "contingencies when a loss is probable and the amount can be reasonably estimated. Management does not "
    "believe the outcome of pending matters will have a material adverse effect.",
    "Item 4. Mine Safety Disclosures",
    "Not applicable.",
    "PART II",
    "Item 5. Market for Registrant's Common Equity and Related Stockholder Matters",
    "~Our common stock is listed under the symbol {ticker}. As of the end of fiscal {fy}, there were "
    "approximately {holders} holders of record.",
    "Item 6. [Reserved]",
    "Item 7. Management's Discussion and Analysis of Financial Condition and Results of Operations",
    "Overview",
    "@mdna_overview",
    "@pad_mdna_pre",
    "Results of Operations",
    "@results",
    "~Gross margin was {margin}% of net sales, compared with {prior_margin}% in the prior year. Operating "
    "expenses reflected continued investment in {tech} and sales capacity.",
    "@pad_mdna_post",
    "Item 7A. Quantitative and Qualitative Disclosures About Market Risk",
    "~We are exposed to market risks from changes in interest rates and foreign currency exchange rates. "
    "A hypothetical 100 basis point increase in interest rates would change annual interest expense by "
    "approximately {money}. We are also exposed to price changes for {input}.",
    "Item 8. Financial Statements and Supplementary Data",
    "Report of Independent Registered Public Accounting Firm",
    "~In our opinion, the consolidated financial statements present fairly, in all material respects, the "
    "financial position of {name} as of the end of fiscal {fy}, in conformity with accounting principles "
    "generally accepted in the United States of America. /s/ {auditor}",
    "@statement",
    "NOTES TO CONSOLIDATED FINANCIAL STATEMENTS",
    "Note 1. Organization and Summary of Significant Accounting Policies",
    "~{company} {desc}. The consolidated financial statements include the accounts of the company and its "
    "subsidiaries. All intercompany balances and transactions have been eliminated.",
    "@pad_notes",
    "Item 9. Changes in and Disagreements With Accountants on Accounting and Financial Disclosure",
    "None.",
    "Item 9A. Controls and Procedures",
    "~Management concluded that our disclosure controls and procedures were effective as of the end of "
    "fiscal {fy}. Our internal control over financial reporting was audited by {auditor}.",
    "Item 9B. Other Information",
    "None.",
    "PART III",
    "Item 10. Directors, Executive Officers and Corporate Governance",
    "~The information required by this section is incorporated by reference to our definitive proxy "
    "statement for the {next_fy} annual meeting of stockholders.",
    "Item 11. Executive Compensation",
    "Incorporated by reference to our definitive proxy statement.",
    "Item 12. Security Ownership of Certain Beneficial Owners and Management",
    "Incorporated by reference to our definitive proxy statement.",
    "Item 13. Certain Relationships and Related Transactions, and Director Independence",
    "Incorporated by reference to our definitive proxy statement.",
    "Item 14. Principal Accountant Fees and Services",
    "Incorporated by reference to our definitive proxy statement.",
    "PART IV",
    "Item 15. Exhibits and Financial Statement Schedules",
    "~The financial statements listed in the index to the consolidated financial statements are filed with "
    "this report. Schedules are omitted because they are not required or not applicable.",
    "SIGNATURES",
    "~Pursuant to the requirements of Section 13 or 15(d) of the Securities Exchange Act of 1934, the "
    "registrant has duly caused this report to be signed on its behalf by the undersigned, thereunto duly "
    "authorized.",
    "{company}\n\nBy: /s/ {ceo}\n{ceo}\nChief Executive Officer\n\nBy: /s/ {cfo}\n{cfo}\n"
    "Chief Financial Officer\n\nDate: {filed}",
)

# Rows of the statement of operations: (label, value key, whether the row carries a dollar sign).
STATEMENT_ROWS: tuple[tuple[str, str, bool], ...] = (
    ("  Product revenues", "prod", True), ("  Service revenues", "svc", False),
    ("Total revenues", "tot", False), ("Cost of revenues", "cogs", False), ("Gross profit", "gp", False),
    ("  Research and development", "rd", False), ("  Selling, general and administrative", "sga", False),
    ("Total operating expenses", "opex", False), ("Operating income (loss)", "op", False),
    ("Interest and other income (expense), net", "oth", False),
    ("Income (loss) before income taxes", "pre", False), ("Provision for income taxes", "tax", False),
    ("Net income (loss)", "net", True),
)  # fmt: skip
