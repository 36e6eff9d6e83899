// client.mjs sends one GET with a retrying client of the npm registry, configured as its
// documentation's first example does, and prints the final status (or what it failed with).
// Usage: node client.mjs got|ky|axios-retry URL, from a folder whose node_modules holds the
// packages (see ../../README.md).
const [, , name, url] = process.argv;

async function run() {
	switch (name) {
	case 'got': {
		const { default: got } = await import('got');
		try {
			return (await got(url)).statusCode;
		} catch (e) {
			return e.response?.statusCode ?? e.code ?? String(e);
		}
	}
	case 'ky': {
		const { default: ky } = await import('ky');
		try {
			return (await ky(url)).status;
		} catch (e) {
			return e.response?.status ?? String(e);
		}
	}
	case 'axios-retry': {
		const { default: axios } = await import('axios');
		const { default: axiosRetry } = await import('axios-retry');
		axiosRetry(axios);
		try {
			return (await axios.get(url)).status;
		} catch (e) {
			return e.response?.status ?? e.code ?? String(e);
		}
	}
	}
	throw new Error('unknown client ' + name);
}

console.log(await run());
