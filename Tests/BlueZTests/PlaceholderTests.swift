import Testing
@testable import BlueZ

@Suite struct BlueZPlaceholderTests {
    @Test func serviceNameIsBlueZ() { #expect(BlueZ.serviceName == "org.bluez") }
}
