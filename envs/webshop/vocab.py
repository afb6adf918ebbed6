"""Word lists the catalogue generator draws from: five categories of product types.

Each product type has a search query (the reference scraped products by query), a category path
(``›``-separated, as on the product pages the reference scraped), attribute phrases, option types
with their values, a price range, and a few words for titles. Attribute phrases of one type are
chosen so that no two of them match under the reward's fuzzy rule (tested), which keeps every
attribute of an instruction meaningful.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATEGORIES", "ProductType", "PRODUCT_TYPES"]

COLORS = [
    "black",
    "white",
    "navy",
    "grey",
    "red",
    "pink",
    "beige",
    "green",
    "brown",
    "purple",
    "khaki",
    "burgundy",
    "yellow",
    "teal",
    "ivory",
    "olive",
    "orange",
    "silver",
]
APPAREL_SIZES = ["x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large"]
SHOE_SIZES = ["6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12"]
PACKS = ["1 pack", "2 pack", "3 pack", "4 pack", "6 pack", "12 pack"]


@dataclass(frozen=True)
class ProductType:
    category: str
    noun: str
    query: str
    path: str
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    price: tuple[float, float]
    extras: tuple[str, ...] = ()


def _t(category, noun, query, path, attributes, options, price, extras=""):
    return ProductType(
        category,
        noun,
        query,
        path,
        tuple(a.strip() for a in attributes.split(",")),
        {k: tuple(v) for k, v in options.items()},
        price,
        tuple(extras.split(",")) if extras else (),
    )


_B = "Beauty & Personal Care"
_E = "Electronics"
_F = "Clothing, Shoes & Jewelry"
_H = "Home & Kitchen › Furniture"
_G = "Grocery & Gourmet Food"

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # -- beauty ---------------------------------------------------------------------------------
    _t(
        "beauty",
        "shampoo",
        "shampoo",
        f"{_B} › Hair Care › Shampoo & Conditioner › Shampoos",
        "sulfate free, paraben free, argan oil, tea tree, dry hair, hair growth, color treated, "
        "cruelty free, dandruff control, vegan formula",
        {
            "size": ["8 fl oz", "12 fl oz", "16.9 fl oz", "33.8 fl oz"],
            "scent": ["lavender", "coconut", "peppermint", "unscented", "rosemary", "citrus"],
        },
        (6, 38),
        "salon,daily,moisturizing,clarifying",
    ),
    _t(
        "beauty",
        "face moisturizer",
        "face moisturizer",
        f"{_B} › Skin Care › Face › Creams & Moisturizers",
        "hyaluronic acid, sensitive skin, fragrance free, anti aging, oil free, spf protection, "
        "vitamin c, dermatologist tested, non comedogenic, night repair",
        {"size": ["1 fl oz", "1.7 fl oz", "2.5 fl oz", "3.4 fl oz"]},
        (9, 65),
        "hydrating,daily,lightweight,gel",
    ),
    _t(
        "beauty",
        "lipstick",
        "matte lipstick",
        f"{_B} › Makeup › Lips › Lipstick",
        "long lasting, matte finish, waterproof, cruelty free, moisturizing formula, vitamin e, "
        "smudge proof, highly pigmented",
        {"color": COLORS[:12], "size": PACKS[:3]},
        (5, 30),
        "velvet,liquid,creamy",
    ),
    _t(
        "beauty",
        "nail polish",
        "nail polish",
        f"{_B} › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
        "quick dry, gel effect, non toxic, chip resistant, high shine, glitter finish, nail art, "
        "long wear",
        {"color": COLORS, "size": PACKS[:4]},
        (4, 25),
        "salon,gloss,professional",
    ),
    _t(
        "beauty",
        "hair extensions",
        "clip in hair extensions",
        f"{_B} › Hair Care › Hair Extensions, Wigs & Accessories › Extensions",
        "natural looking, human hair, heat resistant, easy to apply, straight hair, curly hair, "
        "double weft, tangle free",
        {
            "color": ["black", "brown", "blonde", "auburn", "ombre", "platinum"],
            "size": ["14 inch", "18 inch", "22 inch", "26 inch"],
        },
        (15, 90),
        "seamless,thick,full head",
    ),
    _t(
        "beauty",
        "body lotion",
        "body lotion",
        f"{_B} › Skin Care › Body › Moisturizers › Lotions",
        "shea butter, cocoa butter, dry skin, non greasy, aloe vera, paraben free, fast absorbing, "
        "natural ingredients",
        {
            "scent": ["vanilla", "lavender", "coconut", "unscented", "cucumber", "jasmine"],
            "size": ["8 oz", "13.5 oz", "16 oz", "32 oz"],
        },
        (5, 28),
        "daily,nourishing,soothing",
    ),
    _t(
        "beauty",
        "makeup brush set",
        "makeup brush set",
        f"{_B} › Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
        "synthetic bristles, travel case, easy to clean, cruelty free, soft bristles, foundation brush, "
        "eyeshadow blending",
        {
            "color": ["black", "pink", "white", "purple", "gold", "silver"],
            "size": ["10 pieces", "12 pieces", "16 pieces", "20 pieces"],
        },
        (8, 45),
        "professional,premium,kabuki",
    ),
    _t(
        "beauty",
        "perfume",
        "perfume for women",
        f"{_B} › Fragrance › Women's › Eau de Parfum",
        "long lasting, floral scent, fresh scent, travel size, alcohol free, woody notes, gift set",
        {"size": ["1 fl oz", "1.7 fl oz", "3.4 fl oz"]},
        (18, 120),
        "eau de parfum,spray,signature",
    ),
    # -- electronics ------------------------------------------------------------------------------
    _t(
        "electronics",
        "wireless earbuds",
        "wireless earbuds",
        f"{_E} › Headphones, Earbuds & Accessories › Earbuds",
        "noise cancelling, bluetooth 5.3, charging case, water resistant, touch control, "
        "long battery life, built in microphone, deep bass",
        {"color": ["black", "white", "navy", "pink", "green"]},
        (15, 150),
        "true wireless,sport,stereo",
    ),
    _t(
        "electronics",
        "bluetooth speaker",
        "portable bluetooth speaker",
        f"{_E} › Portable Audio & Video › Portable Speakers & Docks",
        "waterproof, portable, stereo sound, long battery life, outdoor use, built in microphone, "
        "usb charging, party lights",
        {"color": ["black", "blue", "red", "grey", "green"]},
        (20, 180),
        "wireless,mini,rugged",
    ),
    _t(
        "electronics",
        "phone case",
        "iphone case",
        f"{_E} › Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
        "shockproof, slim fit, wireless charging compatible, clear back, kickstand, "
        "screen protector included, raised edges, anti scratch",
        {
            "color": ["black", "clear", "navy", "pink", "purple", "red", "green"],
            "size": ["iphone 13", "iphone 14", "iphone 15", "iphone 15 pro", "iphone 15 pro max"],
        },
        (6, 35),
        "protective,rugged,silicone",
    ),
    _t(
        "electronics",
        "usb c charger",
        "usb c charger",
        f"{_E} › Cell Phones & Accessories › Chargers & Power Adapters › Wall Chargers",
        "fast charging, gan technology, foldable plug, dual port, overheat protection, "
        "compact design, cable included",
        {"color": ["black", "white"], "size": ["20w", "30w", "45w", "65w", "100w"]},
        (10, 60),
        "wall,power adapter,pd",
    ),
    _t(
        "electronics",
        "hdmi cable",
        "hdmi cable",
        f"{_E} › Computers & Accessories › Cables & Accessories › Cables & Interconnects › HDMI Cables",
        "high speed, 4k hdr, braided nylon, gold plated, 8k support, ethernet channel, "
        "audio return channel",
        {"size": ["3 feet", "6 feet", "10 feet", "15 feet", "25 feet"], "style": PACKS[:3]},
        (6, 30),
        "premium,ultra hd",
    ),
    _t(
        "electronics",
        "security camera",
        "wifi security camera",
        f"{_E} › Camera & Photo › Video Surveillance › Surveillance Cameras",
        "night vision, motion detection, two way audio, cloud storage, weatherproof, "
        "1080p hd, pan tilt, easy installation",
        {"color": ["white", "black"], "style": ["indoor", "outdoor", "2 pack", "4 pack"]},
        (25, 200),
        "wifi,home,smart",
    ),
    _t(
        "electronics",
        "tv wall mount",
        "tv wall mount",
        f"{_E} › Television & Video › Accessories › TV Mounts, Stands & Turntables › TV Wall & Ceiling Mounts",
        "full motion, heavy duty, easy installation, tilt and swivel, cable management, "
        "fits most tvs, space saving",
        {"size": ["up to 43 inch", "up to 55 inch", "up to 70 inch", "up to 85 inch"]},
        (18, 120),
        "articulating,low profile",
    ),
    _t(
        "electronics",
        "laptop sleeve",
        "laptop sleeve",
        f"{_E} › Computers & Accessories › Laptop Accessories › Bags, Cases & Sleeves › Sleeves",
        "water repellent, shock absorbing, extra pocket, slim design, soft lining, carrying handle",
        {"color": COLORS[:10], "size": ["13 inch", "14 inch", "15.6 inch", "17 inch"]},
        (10, 40),
        "protective,neoprene",
    ),
    # -- fashion ----------------------------------------------------------------------------------
    _t(
        "fashion",
        "men's t-shirt",
        "men's t-shirt",
        f"{_F} › Men › Clothing › Shirts › T-Shirts",
        "short sleeve, machine wash, cotton blend, crew neck, moisture wicking, slim fit, "
        "quick drying, relaxed fit",
        {"color": COLORS, "size": APPAREL_SIZES},
        (8, 35),
        "athletic,casual,basic,classic",
    ),
    _t(
        "fashion",
        "women's dress",
        "women's summer dress",
        f"{_F} › Women › Clothing › Dresses › Casual",
        "elastic waist, flowy, v neck, midi length, floral print, short sleeve, with pockets, "
        "hand wash",
        {"color": COLORS, "size": APPAREL_SIZES[:6]},
        (15, 60),
        "boho,swing,beach",
    ),
    _t(
        "fashion",
        "running shoes",
        "running shoes",
        f"{_F} › Men › Shoes › Athletic › Running",
        "lightweight, breathable mesh, rubber sole, non slip, arch support, memory foam, "
        "wide toe box, lace up",
        {"color": ["black", "white", "grey", "navy", "red", "blue"], "size": SHOE_SIZES},
        (25, 120),
        "athletic,tennis,walking,trail",
    ),
    _t(
        "fashion",
        "jeans",
        "women's skinny jeans",
        f"{_F} › Women › Clothing › Jeans",
        "high waist, stretch denim, button closure, machine wash, butt lifting, ripped knee",
        {
            "color": ["light wash", "dark wash", "black", "white", "grey"],
            "size": ["2", "4", "6", "8", "10", "12", "14"],
        },
        (18, 70),
        "skinny,slim,classic",
    ),
    _t(
        "fashion",
        "hoodie",
        "pullover hoodie",
        f"{_F} › Men › Clothing › Active › Active Hoodies",
        "fleece lined, drawstring hood, kangaroo pocket, long sleeve, machine wash, regular fit",
        {"color": COLORS, "size": APPAREL_SIZES},
        (15, 55),
        "casual,heavyweight,sweatshirt",
    ),
    _t(
        "fashion",
        "socks",
        "athletic socks",
        f"{_F} › Men › Clothing › Socks › Athletic Socks",
        "cushioned, moisture wicking, arch support, breathable cotton, no show, odor resistant",
        {"color": ["black", "white", "grey", "multicolor"], "size": PACKS},
        (8, 30),
        "athletic,crew,ankle",
    ),
    _t(
        "fashion",
        "baseball cap",
        "baseball cap",
        f"{_F} › Men › Accessories › Hats & Caps › Baseball Caps",
        "adjustable strap, cotton twill, sun protection, embroidered logo, unstructured, "
        "curved brim",
        {"color": COLORS[:14]},
        (8, 30),
        "classic,dad hat,vintage",
    ),
    _t(
        "fashion",
        "leggings",
        "yoga leggings",
        f"{_F} › Women › Clothing › Active › Active Leggings",
        "high waist, tummy control, squat proof, four way stretch, side pockets, full length",
        {"color": COLORS[:12], "size": APPAREL_SIZES[:6]},
        (12, 45),
        "yoga,workout,running",
    ),
    # -- furniture --------------------------------------------------------------------------------
    _t(
        "furniture",
        "office chair",
        "ergonomic office chair",
        f"{_H} › Home Office Furniture › Home Office Chairs › Desk Chairs",
        "lumbar support, adjustable height, swivel wheels, mesh back, padded armrests, "
        "high back, easy assembly, heavy duty",
        {"color": ["black", "grey", "white", "blue", "pink"]},
        (60, 300),
        "ergonomic,executive,computer,task",
    ),
    _t(
        "furniture",
        "bookshelf",
        "bookshelf",
        f"{_H} › Living Room Furniture › Bookcases",
        "solid wood, easy assembly, open shelves, industrial style, space saving, anti tip, "
        "metal frame",
        {
            "color": ["white", "black", "walnut", "oak", "grey"],
            "size": ["3 tier", "4 tier", "5 tier", "6 tier"],
        },
        (40, 260),
        "tall,ladder,storage,display",
    ),
    _t(
        "furniture",
        "coffee table",
        "coffee table",
        f"{_H} › Living Room Furniture › Tables › Coffee Tables",
        "lift top, storage shelf, solid wood, tempered glass, mid century, easy assembly, "
        "round shape, rustic finish",
        {"color": ["walnut", "black", "white", "oak", "grey"]},
        (50, 280),
        "modern,farmhouse,living room",
    ),
    _t(
        "furniture",
        "ottoman bench",
        "storage ottoman bench",
        f"{_H} › Living Room Furniture › Ottomans",
        "faux leather, storage space, tufted top, space saving, foldable, velvet fabric, "
        "wooden legs",
        {
            "color": ["black", "grey", "beige", "navy", "green", "pink"],
            "size": ["30x15x15 inch", "40x15x16 inch", "43x17x17 inch"],
        },
        (30, 160),
        "footrest,upholstered,entryway",
    ),
    _t(
        "furniture",
        "bed frame",
        "queen bed frame",
        f"{_H} › Bedroom Furniture › Beds, Frames & Bases › Beds",
        "no box spring needed, metal platform, under bed storage, noise free, easy assembly, "
        "upholstered headboard, wood slats",
        {"color": ["black", "grey", "white", "brown"], "size": ["twin", "full", "queen", "king"]},
        (90, 450),
        "platform,heavy duty,modern",
    ),
    _t(
        "furniture",
        "nightstand",
        "nightstand",
        f"{_H} › Bedroom Furniture › Nightstands",
        "charging station, two drawers, solid wood, easy assembly, open shelf, led lights, "
        "small spaces",
        {"color": ["white", "black", "walnut", "oak", "grey"], "size": PACKS[:2]},
        (35, 180),
        "bedside,end table,modern",
    ),
    _t(
        "furniture",
        "tv stand",
        "tv stand",
        f"{_H} › Living Room Furniture › TV & Media Furniture › Television Stands & Entertainment Centers",
        "cable management, storage cabinet, led lights, engineered wood, glass shelves, "
        "farmhouse style, open shelving",
        {
            "color": ["white", "black", "walnut", "grey", "oak"],
            "size": ["55 inch", "65 inch", "75 inch", "85 inch"],
        },
        (70, 350),
        "entertainment center,media console",
    ),
    _t(
        "furniture",
        "bar stool",
        "bar stools set of 2",
        f"{_H} › Kitchen & Dining Room Furniture › Stools › Barstools",
        "adjustable height, swivel seat, counter height, back support, footrest, faux leather, "
        "metal legs",
        {
            "color": ["black", "grey", "white", "brown", "green"],
            "size": ["set of 2", "set of 3", "set of 4"],
        },
        (50, 250),
        "counter,kitchen,modern",
    ),
    # -- grocery ----------------------------------------------------------------------------------
    _t(
        "grocery",
        "ground coffee",
        "ground coffee",
        f"{_G} › Beverages › Coffee, Tea & Cocoa › Coffee › Ground Coffee",
        "medium roast, dark roast, single origin, fair trade, usda organic, low acid, "
        "decaf, whole bean",
        {
            "flavor": ["original", "french vanilla", "hazelnut", "caramel", "mocha"],
            "size": ["12 ounce", "24 ounce", "2 pound", "5 pound"],
        },
        (7, 45),
        "arabica,breakfast blend,gourmet",
    ),
    _t(
        "grocery",
        "green tea",
        "green tea bags",
        f"{_G} › Beverages › Coffee, Tea & Cocoa › Tea › Green",
        "caffeine free, usda organic, non gmo, individually wrapped, loose leaf, antioxidant rich, "
        "gluten free",
        {
            "flavor": ["jasmine", "mint", "lemon", "honey", "matcha"],
            "size": ["20 count", "40 count", "100 count"],
        },
        (4, 25),
        "herbal,premium,japanese",
    ),
    _t(
        "grocery",
        "protein bars",
        "protein bars",
        f"{_G} › Snack Foods › Bars › Protein Bars",
        "high protein, low sugar, gluten free, keto friendly, plant based, non gmo, "
        "no artificial sweeteners",
        {
            "flavor": [
                "chocolate chip",
                "peanut butter",
                "cookie dough",
                "birthday cake",
                "salted caramel",
            ],
            "size": ["12 count", "15 count", "24 count"],
        },
        (12, 45),
        "snack,meal replacement",
    ),
    _t(
        "grocery",
        "beef jerky",
        "beef jerky",
        f"{_G} › Meat & Seafood › Jerky & Dried Meats › Beef Jerky",
        "grass fed, high protein, gluten free, low fat, zero sugar, keto friendly, no preservatives",
        {
            "flavor": ["original", "teriyaki", "peppered", "sweet and spicy", "hickory smoked"],
            "size": ["2.85 ounce", "8 ounce", "16 ounce"],
        },
        (6, 40),
        "smoked,snack,tender",
    ),
    _t(
        "grocery",
        "olive oil",
        "extra virgin olive oil",
        f"{_G} › Pantry Staples › Cooking Oils › Olive Oils",
        "cold pressed, usda organic, first harvest, non gmo, glass bottle, single origin, "
        "high polyphenol",
        {"size": ["16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "101 fl oz"]},
        (8, 50),
        "italian,greek,mediterranean",
    ),
    _t(
        "grocery",
        "dark chocolate",
        "dark chocolate bar",
        f"{_G} › Snack Foods › Candy & Chocolate › Chocolate Bars",
        "fair trade, dairy free, vegan, low sugar, usda organic, individually wrapped, gluten free",
        {"flavor": ["sea salt", "almond", "orange", "mint", "raspberry"], "size": PACKS[:5]},
        (5, 35),
        "gourmet,72% cacao,premium",
    ),
    _t(
        "grocery",
        "gummy candy",
        "gummy candy",
        f"{_G} › Snack Foods › Candy & Chocolate › Gummy Candy",
        "fat free, gluten free, individually wrapped, vegan, real fruit juice, party favors",
        {
            "flavor": ["assorted fruit", "sour", "cherry", "watermelon", "peach rings"],
            "size": ["1 pound", "2 pound", "5 pound"],
        },
        (5, 30),
        "chewy,bulk,candy",
    ),
    _t(
        "grocery",
        "mixed nuts",
        "mixed nuts",
        f"{_G} › Snack Foods › Nuts & Seeds › Mixed Nuts",
        "lightly salted, unsalted, roasted, resealable bag, non gmo, kosher, high protein",
        {"size": ["16 ounce", "30 ounce", "40 ounce", "3 pound"]},
        (8, 40),
        "deluxe,snack,party",
    ),
)

CATEGORIES: tuple[str, ...] = ("beauty", "electronics", "fashion", "furniture", "grocery")

#: Syllables for brand names.
BRAND_SYLLABLES = [
    "lu",
    "vo",
    "ra",
    "ke",
    "mi",
    "sa",
    "to",
    "na",
    "ri",
    "bel",
    "zen",
    "fa",
    "co",
    "pro",
    "ver",
    "ax",
    "ly",
    "on",
    "ta",
    "mo",
    "dex",
    "ar",
    "vi",
    "qu",
    "el",
    "sol",
    "ka",
    "nor",
    "tri",
    "gen",
    "lo",
    "ve",
    "ru",
    "po",
    "xi",
    "ba",
]

DESCRIPTION_OPENERS = (
    "Designed for everyday use, this {noun} combines quality and value.",
    "Our {noun} is made to last and easy to love.",
    "Meet the {noun} that customers come back for.",
    "This {noun} brings reliable performance at a fair price.",
    "Upgrade your routine with a {noun} built around what matters.",
)
DESCRIPTION_ATTRIBUTE = (
    "It is {attr}, so you get exactly what you need.",
    "Featuring {attr} for a better experience.",
    "Thanks to its {attr} design, it stands out from the rest.",
    "Customers choose it because it is {attr}.",
)
DESCRIPTION_CLOSERS = (
    "Satisfaction guaranteed or your money back.",
    "Makes a thoughtful gift for friends and family.",
    "Order today and see the difference.",
    "Backed by our friendly customer service team.",
)
FEATURE_TEMPLATES = (
    "{Attr}: carefully designed for daily use",
    "{Attr} - tested for quality and comfort",
    "{Attr} to make every day easier",
    "Enjoy {attr} without compromise",
)
FILLER_FEATURES = (
    "What you get: the product and a thank you card",
    "Worry-free purchase with responsive after-sales support",
    "Carefully packaged to arrive in perfect condition",
)
REVIEW_TITLES = {
    5: ("Love it!", "Exactly as described", "Great value", "Highly recommend"),
    4: ("Very good", "Works well", "Nice quality"),
    3: ("It's okay", "Does the job", "Average"),
    2: ("Not great", "Disappointed", "Could be better"),
    1: ("Waste of money", "Do not buy", "Broke quickly"),
}
REVIEW_BODIES = {
    5: "I bought this {noun} last month and I am very happy with it.",
    4: "Good {noun} overall, a few small things could be improved.",
    3: "The {noun} is fine but nothing special for the price.",
    2: "The {noun} did not meet my expectations.",
    1: "My {noun} stopped working after a few days.",
}
INSTRUCTION_LEADS = (
    "i am looking for",
    "i need",
    "find me",
    "i want to buy",
    "i'm looking for",
    "can you find me",
    "show me",
)
