"""The sample captures ``gsnb fetch`` can download: where each file comes from, its size and
SHA-256 (so a download is checked, and a copy the user already has is accepted).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """A capture gsnb can fetch.

    Attributes:
        name: what ``gsnb fetch NAME`` calls it.
        description: one line about the capture.
        license: its license in a few words; fetched samples are the user's to honour.
        base_url: where the files live (each file's path is appended).
        files: ``(path inside the sample, bytes, sha256)`` of every file.
        urls: where a file comes from when not from ``base_url`` (by path).

    Example:
        >>> fox = SAMPLES["fox"]
        >>> len(fox.files), fox.size > 20_000_000
        (68, True)
    """

    name: str
    description: str
    license: str
    base_url: str
    files: tuple[tuple[str, int, str], ...]
    urls: tuple[tuple[str, str], ...] = ()

    @property
    def size(self) -> int:
        """Bytes of all its files."""
        return sum(size for _, size, _ in self.files)

    def url(self, path: str) -> str:
        """Where ``path`` is downloaded from."""
        return dict(self.urls).get(path) or f"{self.base_url.rstrip('/')}/{path}"


# The fox as instant-ngp published it with 67 photos (data/nerf/fox, before the set was
# trimmed to 50), at pinned commits so the files and their checksums never change: the
# photos as first committed, and the transforms.json whose paths use forward slashes.
_INSTANT_NGP = "https://raw.githubusercontent.com/NVlabs/instant-ngp"
_FOX_COMMIT = "60dbb8e1c0e3859cf49d70fce7d499f56e4d13a0"
_FOX_TRANSFORMS_COMMIT = "50445dc7d05a5174fc2b4c6dc010af1d892b88f4"

FOX = Sample(
    name="fox",
    description="67 phone photos of a fox figurine, 1080x1920, posed (transforms.json, "
    "OpenCV distortion); the instant-ngp sample scene",
    license="NVIDIA Source Code License (instant-ngp): research and evaluation use only",
    base_url=f"{_INSTANT_NGP}/{_FOX_COMMIT}/data/nerf/fox",
    files=(
        (
            "transforms.json",
            42644,
            "6e39ab762afa7a4ec3febae8048f7e3fbfab62aeb50e58a66645956d8679192c",
        ),
        (
            "images/0001.jpg",
            386948,
            "aef0a5c306c640f0955c0f27642dee876723ecab676b424b7c67c368ec21b16f",
        ),
        (
            "images/0002.jpg",
            400386,
            "e8c34293e0022e40e920692bb095e5c165c8fa05418a5301abc2ef631c0c62ea",
        ),
        (
            "images/0003.jpg",
            390082,
            "053c7fb24ca18b2e76329c8f98ee671ea99068a9004acdc09c4e6b75d4084e13",
        ),
        (
            "images/0004.jpg",
            374233,
            "750be24995a73cf690ab2f8204b5601050176528b65e209bff4d8ab78fa7e891",
        ),
        (
            "images/0005.jpg",
            351573,
            "c66b429d9a3ea4c9849eddbc414b91c73e683d93c0ca2a8d1ee91960e27e9ee1",
        ),
        (
            "images/0006.jpg",
            366803,
            "2f8886b3c7cac5602902f7bd59ad7c112da7beb146c04aa1fdabbb7b220eef04",
        ),
        (
            "images/0007.jpg",
            346871,
            "6a5f768972920253c0912b7ab5ad977b0745b75a862302c5fc749de4a5af7541",
        ),
        (
            "images/0008.jpg",
            344625,
            "0a4baa3e03c6d5c3d73db152020c62b7e1445c63130722a92d3dcc42eaab5528",
        ),
        (
            "images/0009.jpg",
            369750,
            "867bc4daf686588b83d8b0b56ad1bfafa6f5d1b971112385452ca9358acd98e4",
        ),
        (
            "images/0012.jpg",
            349166,
            "0c42740859fb5c4ecf4a680eb5d18fdd0ee93c7d788efd39c22be5eb53ab8c50",
        ),
        (
            "images/0014.jpg",
            361959,
            "79e2b89aeeeedf23d207f9fa82c85ebfcf277df2cdcbd16c65d77623bd253013",
        ),
        (
            "images/0016.jpg",
            329337,
            "c385861ec75960e4088b8ed2ce10f90456baf6c0434666c234b9e0d489dbe4c4",
        ),
        (
            "images/0017.jpg",
            344907,
            "56438cf57f96e3a3d38c506ce1f64a5243d4e48151857d651c2155eede66613b",
        ),
        (
            "images/0018.jpg",
            375745,
            "d2ce02c35d25c49a4034b31c248e159a8f75adbde144d6822b4bddf7860a547c",
        ),
        (
            "images/0019.jpg",
            374369,
            "66d74abbcf2e620c5811b92489bce143e0d746b1d8e4f03430fb468a855e3b73",
        ),
        (
            "images/0021.jpg",
            344688,
            "d2cfbfe371583c0b1237dae330a79f57870452fd0e7585f721935cd33a550938",
        ),
        (
            "images/0022.jpg",
            356551,
            "96b395f6f38e857d69c51b6fd08fbf6846f08af7ce02fda6cf5755247088e6ac",
        ),
        (
            "images/0024.jpg",
            345336,
            "4c40f029631f23826c0bef902e3c0999fffd1e23bd19a36a75a6373707137bba",
        ),
        (
            "images/0025.jpg",
            367603,
            "f7b3edf15014dee1deb6e8edc52423a4beb5abd73c425e8ea94ee8b3c28f397e",
        ),
        (
            "images/0026.jpg",
            352704,
            "a3e2de082452bc02dbeb3b930bb4591ff1f8eacbc7c2a06877b791880ae7f525",
        ),
        (
            "images/0027.jpg",
            365048,
            "6e3e2683b4c0ee86067b17b9aef2a818149205b33927da133ad7bed3f61979f4",
        ),
        (
            "images/0029.jpg",
            377196,
            "50132bea478dd112276e6308e7cf2a70bfa23617f191a0acdd5d0ecf510c48d6",
        ),
        (
            "images/0030.jpg",
            395103,
            "3126fa028931cf38cab78b692bde131e22b4189d8f6f010bb86bb8723de6324d",
        ),
        (
            "images/0031.jpg",
            380638,
            "672a7c1dd0399174b173f2484208de6578fdc7fe9cd85ff6f2a21318e19f72ec",
        ),
        (
            "images/0032.jpg",
            353512,
            "bea4a712731ada432f8060cdb97a7a04148e2081fe4fd6327ce52e99969b0f90",
        ),
        (
            "images/0033.jpg",
            415923,
            "e631b9c8df1d1c3bdcc8afbec2afb40564fb398db3f4c145bef4b4f72571fc83",
        ),
        (
            "images/0034.jpg",
            342410,
            "e526e6f28e2a7d2657c3d5e59ea21c00923084935bae4a3ade5ccdb1459b74e7",
        ),
        (
            "images/0035.jpg",
            348539,
            "8117f5c5cc4a79b9e332f60e18805b023d9bb8a526a151fc4ec88b7e012e7579",
        ),
        (
            "images/0039.jpg",
            404399,
            "c3b74eac0ba41e3fc8798cc558815f42d5827153db14457d4c4cf7e447ae823f",
        ),
        (
            "images/0042.jpg",
            404011,
            "bc02122cef2624089c65304d49b80a02e3056285d67f34ea2c40dde6003ea880",
        ),
        (
            "images/0044.jpg",
            350099,
            "02f3403946aa74b0a69d8e80068c2c2acfc8400d53a3d472f0c8bb9e180dbd5b",
        ),
        (
            "images/0045.jpg",
            380783,
            "62a0c5eb024bd76af09b6a787f34333ab44ddeede8d4998dbff5d1241a2101b0",
        ),
        (
            "images/0046.jpg",
            342707,
            "138b2d01953c2eb9843f97abb612f6d12945dcd74f71bdd73ee8715f762b7cc8",
        ),
        (
            "images/0049.jpg",
            393964,
            "175d38ce8fab0d94cadc1b630c0e0173d61bb427b3070e8830fb3c7def112ba3",
        ),
        (
            "images/0051.jpg",
            362403,
            "04ed54744ef07a2734b2440e8320711f55c3a56a1cd520c37e0298ea0627d328",
        ),
        (
            "images/0052.jpg",
            322794,
            "c1f7a39a9838759a218965d40f00f71cdd082f71ae90f07470102293f175b20e",
        ),
        (
            "images/0054.jpg",
            349691,
            "c4d5af7198188dbaff6d1aac6d1769fc1ccb9a2a49222d30e1ce65b2f2ef4c17",
        ),
        (
            "images/0068.jpg",
            282246,
            "2fabba0efa748f85794cd54a77d876db87df7871ba298d150a67d053de5a6726",
        ),
        (
            "images/0071.jpg",
            335173,
            "8c0fd1e244d01bcb80f036d2320546dd17b55ea698c9a6eacf00f232cbc2ba56",
        ),
        (
            "images/0072.jpg",
            344035,
            "a7f9bb82b3f681080489305772fbd59219ebf6ed393a5c771ac88bd6291b1ab4",
        ),
        (
            "images/0073.jpg",
            349949,
            "3e6e1ce2abd35ce0181ac98924c3849dc7c141ff2129ac50a56b10c3f035a548",
        ),
        (
            "images/0074.jpg",
            341445,
            "f460fa95494be3beb15d90ff4cb0a5de843f28120d55c6d7cd69a586fe2d6625",
        ),
        (
            "images/0075.jpg",
            327612,
            "baacc895fdc9a995d32724b552ae901ab2cb0388e97b4587edb14f8d85233b81",
        ),
        (
            "images/0076.jpg",
            335339,
            "7a730a5fb453ce41dbb7567fb742dc6d0d476ac1c996b59d84fff1727d5c3e02",
        ),
        (
            "images/0077.jpg",
            334095,
            "bd3b3c855e24f688fca6aca2656859219b7ac63723c9aa77f24ff9d8a9c968d4",
        ),
        (
            "images/0078.jpg",
            336877,
            "d8416396fde3fc5f1b56140b34a88d69638029b95bffef35c3facb3dbe279e89",
        ),
        (
            "images/0081.jpg",
            354402,
            "d9677b6b3e7aff05287633aee2106543c6ff26cd4252a30c0c808a61945568ab",
        ),
        (
            "images/0083.jpg",
            350937,
            "d7a8ab9f96ff2aef96b5058e55963a1f201cae22ee9b6f46468dccbb04a71579",
        ),
        (
            "images/0084.jpg",
            348894,
            "72adaaa6cfa520233863a712f14707682993a6de05294cc09ddeed3b572940ac",
        ),
        (
            "images/0085.jpg",
            345330,
            "1637df9555ab8cc38bcfe81fd73938a7ffc876bc3a0cb1ebdc2b63872b1be736",
        ),
        (
            "images/0087.jpg",
            347642,
            "ca8b02bc4198e8fdb7dae88b64ba51efb4d33d9c049238c19641d1e7bc68737f",
        ),
        (
            "images/0088.jpg",
            357170,
            "8e55b4e173586fc70efdfbecb26f812bb3c7c2dd0e30f0a13031daee094dfe2a",
        ),
        (
            "images/0089.jpg",
            371682,
            "302bf82cc3967480e03965153e9c2238ef2467cc63e940182b497b8e89e37e8e",
        ),
        (
            "images/0090.jpg",
            327827,
            "6d625ef46d96a30b98f3f8f6972b0d2c649573f381e454c208cb8c07a8d8655d",
        ),
        (
            "images/0093.jpg",
            358581,
            "ec1b613875c32e127aa8ac2ae6384e427d417a01fd01ee1e8b21f8906960bdc5",
        ),
        (
            "images/0094.jpg",
            376334,
            "bc598dbd8e3c37ec779224f594c1db90759c724215c866b6db7a3aa6386e09a5",
        ),
        (
            "images/0097.jpg",
            329759,
            "7a78d4541cfe43b49f5ae7d6813514942fdafa1533a707dbb05a252b495a744a",
        ),
        (
            "images/0099.jpg",
            326284,
            "50cf30142be2e7f5c04c5e584f3beb64c0e49441c204a06bd4c7d44245780e5a",
        ),
        (
            "images/0103.jpg",
            431499,
            "fc3ed4d18f48fdf9b05d62876e1f175e880a4c0ad3eb773dbe45306d60095468",
        ),
        (
            "images/0104.jpg",
            382599,
            "dee77095d99575d52d78492c27b9ff954e60b0b6adc60265d625118b4411bb85",
        ),
        (
            "images/0105.jpg",
            379251,
            "96421e9a12bd0549c6e0337bd7e88930bca680859e66facd2d68dfedd4cc500f",
        ),
        (
            "images/0106.jpg",
            368828,
            "a6901b7cd5f52d3668ba90eebdca5d574b2bb8f0b09af10fbf536cfde63f9377",
        ),
        (
            "images/0107.jpg",
            385511,
            "97193717a93db549d8a17ec309f3aa59d233a1edaa2784bc7b98eaaefde7a6e3",
        ),
        (
            "images/0108.jpg",
            375732,
            "a76fd8cf1bb6faa5370a2c1a46830e7c43c3d5c7def314ea7e6999b01416d2bc",
        ),
        (
            "images/0110.jpg",
            358964,
            "af0dcd1b517aa0501a97cd2fb626366dfd8fc8b7580c04c4c7bd13c129116a4c",
        ),
        (
            "images/0113.jpg",
            375534,
            "b01dce99f3bce1b6872ae410519ee64ea6befc4a937136de15510547fb8c03fd",
        ),
        (
            "images/0115.jpg",
            471017,
            "ed663fe7020955a2410896cbc726ffb3cd5570d0e254a5e7f48739a4e3f8a313",
        ),
    ),
    urls=(
        (
            "transforms.json",
            f"{_INSTANT_NGP}/{_FOX_TRANSFORMS_COMMIT}/data/nerf/fox/transforms.json",
        ),
    ),
)

SAMPLES: dict[str, Sample] = {sample.name: sample for sample in (FOX,)}
"""Every sample ``gsnb fetch`` knows, by name."""
